# tfcapi-lint settings for the docker machinepool module (docs/src/tfcapi-lint.md, "Configuration
# file"): `tfcapi-lint module modules/docker/machinepool` lints it as a machinepool module, strictly.
role   = "machinepool"
strict = true
