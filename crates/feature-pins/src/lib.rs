//! No code: a dependency that asks for the features the whole workspace's test build enables, so
//! that every build of the workspace (tests, the static binaries, the Quick Start) compiles each
//! dependency once (`Cargo.toml` says why; README, "Run the tests").
