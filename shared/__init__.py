"""Code every Tessera service uses: the pure scheduling core, the simulator, the bus and the store."""
