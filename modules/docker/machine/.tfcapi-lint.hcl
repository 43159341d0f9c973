# tfcapi-lint settings for the docker machine module (docs/src/tfcapi-lint.md, "Configuration
# file"): `tfcapi-lint module modules/docker/machine` lints it as a machine module, strictly.
role   = "machine"
strict = true
