"""Priority classes: names users write (``priority-class: high``) and the values the core compares.

Higher runs first and may preempt lower.  The openb trace's ``qos`` maps onto them: LS
(latency-sensitive) -> ``high``; Guaranteed and Burstable -> ``normal``; BE (best effort) ->
``best-effort``.  A job without a class has the value of its ``priority`` field (0 by default,
the value of ``normal``).
"""

from __future__ import annotations

PRIORITY_CLASSES: dict[str, int] = {
    "critical": 1000,
    "high": 100,
    "normal": 0,
    "best-effort": -100,
}

QOS_CLASSES: dict[str, str] = {
    "LS": "high",
    "Guaranteed": "normal",
    "Burstable": "normal",
    "BE": "best-effort",
}


def unknown_class(name: str) -> str | None:
    """Why ``name`` is no priority class, naming the field and the classes there are (None: it
    is one): the one message a job spec and a queue's ``large-jobs`` give."""
    if name in PRIORITY_CLASSES:
        return None
    return f"priority-class {name!r} is unknown; classes: {', '.join(PRIORITY_CLASSES)}"


def class_value(name: str) -> int:
    """The value of a named class; ``KeyError`` names the classes there are."""
    try:
        return PRIORITY_CLASSES[name]
    except KeyError:
        raise KeyError(f"unknown priority class {name!r}; classes: {', '.join(PRIORITY_CLASSES)}") from None


def class_of_qos(qos: str) -> str:
    """The class an openb pod's ``qos`` maps to (unknown or empty: ``normal``)."""
    return QOS_CLASSES.get(qos, "normal")
