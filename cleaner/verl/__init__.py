"""The only package that imports verl: everything CLEANER plugs into verl 0.9.1 lives here.

Agent loop, agent-loop manager and workers, trainer metric hooks, plugin registration, reward manager,
the `BaseTool` adapter of the Python tool, the tool-parser registration, the `generate()` adapter of the
HTTP rollout clients and the one helper that composes verl's trainer config. Kept import-light: importing
`cleaner.verl` alone does not import verl.
"""
