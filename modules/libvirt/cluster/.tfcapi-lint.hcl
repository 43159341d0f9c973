# tfcapi-lint settings for the libvirt cluster module (docs/src/tfcapi-lint.md, "Configuration
# file"). libvirt networks, pools and volumes take no tags or labels, so captf_tags has nowhere
# to go in this module; the machine module puts them on each domain.
role          = "cluster"
strict        = true
allow_warning = ["input/tags-unused"]
