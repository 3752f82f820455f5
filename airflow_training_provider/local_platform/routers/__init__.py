"""One module per emulated platform: its wire format over the engine (``tensorone``: TensorOne v2)."""
