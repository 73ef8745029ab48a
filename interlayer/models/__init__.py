"""The zoo's model files. Each mechanism's configuration, modeling and helper files sit in this one folder, so
`save_pretrained` ships them together as remote code (see `zoo_common.py`)."""
