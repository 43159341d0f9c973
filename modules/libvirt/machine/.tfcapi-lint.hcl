# tfcapi-lint settings for the libvirt machine module (docs/src/tfcapi-lint.md, "Configuration
# file"): `tfcapi-lint module modules/libvirt/machine` lints it as a machine module, strictly.
role   = "machine"
strict = true
