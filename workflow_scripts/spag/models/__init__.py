"""Model folders: the base model (hub, local, packaged GGUF) and the embedded tiny model."""
