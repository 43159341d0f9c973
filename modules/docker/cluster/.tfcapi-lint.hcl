# tfcapi-lint settings for the docker cluster module (docs/src/tfcapi-lint.md, "Configuration
# file"): `tfcapi-lint module modules/docker/cluster` lints it as a cluster module, strictly.
role   = "cluster"
strict = true
