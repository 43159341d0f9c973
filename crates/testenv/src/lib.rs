//! The test environment (ENGINEERING.md §2): a real control plane, a process kubelet, an OCI
//! registry and an image builder, for integration and end-to-end tests.
