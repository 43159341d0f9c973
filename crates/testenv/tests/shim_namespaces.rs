//! The container shim on its own: a process in its own PID and mount namespace (it is PID 1),
//! as uid 65532, with a read-only root and a writable volume, exactly the given environment,
//! signals forwarded, exit codes passed through, start errors reported, writes kept in a
//! per-container overlay.
//!
//! Needs root (namespaces, mounts).
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use testenv::image::{Layer, unpack_layer};
use testenv::shim::{MountSpec, ShimArgs};

const BIN: &str = env!("CARGO_BIN_EXE_captf-testenv");

/// A root filesystem holding the fixture binary (`/fixture`) and its libraries, unpacked the
/// way the kubelet unpacks images.
fn rootfs(dir: &Path) -> PathBuf {
    let mut layer = Layer::new();
    layer.host_binary("/fixture", Path::new(BIN)).unwrap();
    layer.dir("/tmp", 0o1777);
    let blob = layer.build().unwrap();
    let root = dir.join("rootfs");
    std::fs::create_dir(&root).unwrap();
    unpack_layer(&root, flate2::read::GzDecoder::new(&blob.data[..])).unwrap();
    root
}

fn shim(args: &ShimArgs) -> Command {
    let mut c = Command::new(BIN);
    c.arg("shim").args(args.to_args());
    c
}

fn volume(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let v = dir.join("volume");
    std::fs::create_dir(&v).unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o777)).unwrap();
    v
}

#[test]
fn runs_as_pid_1_and_uid_65532_with_a_read_only_root_and_a_writable_volume() {
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path());
    let vol = volume(dir.path());
    let mut args = ShimArgs::new(
        &root,
        [
            "/fixture",
            "fixture",
            "probe",
            "--out",
            "/data/probe.json",
            "--check-writable",
            "/data",
            "--check-writable",
            "/tmp",
        ]
        .map(String::from)
        .to_vec(),
    );
    args.readonly_rootfs = true;
    args.overlay = Some(dir.path().join("scratch"));
    args.mounts = vec![MountSpec {
        source: vol.clone(),
        destination: "/data".into(),
        read_only: false,
    }];
    args.uid = 65532;
    args.gid = 65532;
    args.groups = vec![65532, 4000];
    args.workdir = Some("/data".into());
    args.env = vec!["ONLY=this".into()];
    args.hostname = Some("box".into());
    args.no_new_privileges = true;
    let out = shim(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe: serde_json::Value =
        serde_json::from_slice(&std::fs::read(vol.join("probe.json")).unwrap()).unwrap();
    assert_eq!(probe["pid"], 1);
    assert_eq!(probe["uid"], 65532);
    assert_eq!(probe["gid"], 65532);
    assert_eq!(probe["groups"], serde_json::json!([4000, 65532]));
    assert_eq!(probe["cwd"], "/data");
    assert_eq!(probe["hostname"], "box");
    assert_eq!(probe["env"], serde_json::json!({"ONLY": "this"}));
    assert_eq!(probe["root_writable"], false);
    assert_eq!(probe["writable"]["/data"], true);
    assert_eq!(
        probe["writable"]["/tmp"], false,
        "/tmp is part of the read-only root"
    );
    let owner =
        std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(vol.join("probe.json")).unwrap());
    assert_eq!(owner, 65532);
    // Nothing of the container's mounts is left on the host.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(dir.path().to_str().unwrap()));
}

#[test]
fn writes_stay_in_the_containers_overlay() {
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path());
    let run = |scratch: &str, args: &[&str]| {
        let mut a = ShimArgs::new(&root, args.iter().map(|s| (*s).to_owned()).collect());
        a.overlay = Some(dir.path().join(scratch));
        shim(&a).output().unwrap()
    };
    let first = run(
        "one",
        &["/fixture", "fixture", "probe", "--out", "/tmp/mine"],
    );
    assert!(first.status.success());
    let second = run(
        "two",
        &["/fixture", "fixture", "probe", "--read", "/tmp/mine"],
    );
    let probe: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(
        probe["files"]["/tmp/mine"],
        serde_json::Value::Null,
        "not the other container's write"
    );
    assert!(dir.path().join("one/upper/tmp/mine").is_file());
    assert!(!root.join("tmp/mine").exists(), "the image stays untouched");
}

#[test]
fn forwards_sigterm_and_passes_exit_codes_through() {
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path());
    let vol = volume(dir.path());
    let mut args = ShimArgs::new(
        &root,
        [
            "/fixture",
            "fixture",
            "wait-signal",
            "--marker",
            "/data/marker",
            "--exit-code",
            "42",
        ]
        .map(String::from)
        .to_vec(),
    );
    args.uid = 65532;
    args.gid = 65532;
    args.mounts = vec![MountSpec {
        source: vol.clone(),
        destination: "/data".into(),
        read_only: false,
    }];
    let pid_file = dir.path().join("pid");
    args.pid_file = Some(pid_file.clone());
    let mut child = shim(&args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(
            Instant::now() < deadline,
            "the shim never reported the command running"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let container_pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_ne!(container_pid, child.id() as i32);
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(42));
    assert_eq!(
        std::fs::read_to_string(vol.join("marker")).unwrap(),
        "SIGTERM"
    );

    // Killed by a signal: 128 + signal.
    args.command = ["/fixture", "fixture", "wait-signal", "--ignore-sigterm"]
        .map(String::from)
        .to_vec();
    std::fs::remove_file(&pid_file).unwrap();
    let mut child = shim(&args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !pid_file.exists() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let container_pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(container_pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_eq!(child.wait().unwrap().code(), Some(137));
}

#[test]
fn start_errors_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path());
    let err = dir.path().join("err");
    let mut args = ShimArgs::new(&root, vec!["no-such-command".into()]);
    args.error_file = Some(err.clone());
    let out = shim(&args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(testenv::shim::START_ERROR_EXIT_CODE)
    );
    let msg = std::fs::read_to_string(&err).unwrap();
    assert!(msg.contains("executable file not found in $PATH"), "{msg}");

    args.command = vec![
        "/fixture".into(),
        "fixture".into(),
        "exit".into(),
        "--code".into(),
        "7".into(),
    ];
    args.error_file = None;
    args.mounts = vec![MountSpec {
        source: dir.path().join("missing"),
        destination: "/x".into(),
        read_only: false,
    }];
    let out = shim(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(128));
    assert!(String::from_utf8_lossy(&out.stderr).contains("volume source"));
    args.mounts.clear();
    assert_eq!(shim(&args).output().unwrap().status.code(), Some(7));
}

/// A container (here non-root: a change of user clears the parent-death signal, the shim sets it
/// again) dies with its shim, however the shim dies.
#[test]
fn the_container_dies_with_its_shim() {
    let dir = tempfile::tempdir().unwrap();
    let root = rootfs(dir.path());
    let mut args = ShimArgs::new(
        &root,
        ["/fixture", "fixture", "wait-signal", "--ignore-sigterm"]
            .map(String::from)
            .to_vec(),
    );
    args.uid = 65532;
    args.gid = 65532;
    let pid_file = dir.path().join("pid");
    args.pid_file = Some(pid_file.clone());
    let mut child = shim(&args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    let container: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let gone = |pid: i32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !gone(container) {
        assert!(
            Instant::now() < deadline,
            "container {container} outlived its shim"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
