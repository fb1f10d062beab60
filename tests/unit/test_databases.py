"""Database URLs and names for the helpers that create databases beside a configured one."""

from shared.eventstore.databases import beside, database_name, quoted


def test_a_database_beside_keeps_the_server_user_and_options() -> None:
    url = "postgresql://tessera:pw@127.0.0.1:15432/tessera?sslmode=disable"
    assert (
        beside(url, "tessera_demo") == "postgresql://tessera:pw@127.0.0.1:15432/tessera_demo?sslmode=disable"
    )
    assert database_name(beside(url, "odd name")) == "odd name"
    assert database_name("postgresql://h:1") == ""


def test_names_are_quoted_as_postgresql_quotes_identifiers() -> None:
    assert quoted("tessera") == '"tessera"'
    assert quoted('a"b') == '"a""b"'
