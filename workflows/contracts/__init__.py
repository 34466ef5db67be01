"""The contracts: every value that crosses a boundary (client -> workflow, workflow -> activity, workflow
-> client), one module per concern, so a client imports what it speaks and nothing of the workflows' logic.
Their field names and JSON shapes are the public API: clients, stored histories and DeerFlow's UI read them."""
