//! Writes OCI image layouts for the image tests: gzip layers from a list of entries, an image
//! config with user and labels, manifests, and an index with or without platforms.

#![allow(dead_code, clippy::unwrap_used)]

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One entry of a layer.
#[derive(Debug, Clone)]
pub enum Item {
    /// A file: path, contents, mode, uid, gid.
    File(String, Vec<u8>, u32, u64, u64),
    /// A directory: path, mode, uid, gid.
    Dir(String, u32, u64, u64),
    /// A symlink: path, target.
    Symlink(String, String),
    /// A whiteout of a path.
    Whiteout(String),
}

/// A file owned by 65532, mode 0644.
pub fn file(path: &str, contents: &str) -> Item {
    Item::File(
        path.to_owned(),
        contents.as_bytes().to_vec(),
        0o644,
        65532,
        65532,
    )
}

/// An executable owned by root.
pub fn exe(path: &str) -> Item {
    Item::File(
        path.to_owned(),
        b"\x7fELF fake runtime".to_vec(),
        0o755,
        0,
        0,
    )
}

/// A directory owned by 65532.
pub fn dir(path: &str) -> Item {
    Item::Dir(path.to_owned(), 0o755, 65532, 65532)
}

/// A layer tar.gz.
pub fn layer(items: &[Item]) -> Vec<u8> {
    let mut b = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for item in items {
        let mut h = tar::Header::new_ustar();
        match item {
            Item::File(path, data, mode, uid, gid) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(*mode);
                h.set_uid(*uid);
                h.set_gid(*gid);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, path.trim_start_matches('/'), &data[..])
                    .unwrap();
            }
            Item::Dir(path, mode, uid, gid) => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(*mode);
                h.set_uid(*uid);
                h.set_gid(*gid);
                h.set_size(0);
                b.append_data(
                    &mut h,
                    format!("{}/", path.trim_start_matches('/')),
                    &[][..],
                )
                .unwrap();
            }
            Item::Symlink(path, target) => {
                h.set_entry_type(tar::EntryType::Symlink);
                h.set_mode(0o777);
                h.set_size(0);
                b.append_link(&mut h, path.trim_start_matches('/'), target)
                    .unwrap();
            }
            Item::Whiteout(path) => {
                let p = Path::new(path.trim_start_matches('/'));
                let name = format!(".wh.{}", p.file_name().unwrap().to_string_lossy());
                let wh = p.parent().map_or(PathBuf::from(&name), |d| d.join(&name));
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(0);
                b.append_data(&mut h, wh, &[][..]).unwrap();
            }
        }
    }
    b.into_inner().unwrap().finish().unwrap()
}

/// The files of a module directory as layer items under `/captf/module`.
pub fn module_items(module_dir: &Path) -> Vec<Item> {
    let mut items = vec![dir("/captf"), dir("/captf/module")];
    let mut names: Vec<_> = std::fs::read_dir(module_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    for name in names {
        let text = std::fs::read_to_string(module_dir.join(&name)).unwrap();
        items.push(file(&format!("/captf/module/{name}"), &text));
    }
    items
}

/// The no-op module of a role.
pub fn noop(role: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../modules/noop")
        .join(role)
}

/// An image to write.
#[derive(Debug, Clone)]
pub struct Image {
    /// Layers, bottom first.
    pub layers: Vec<Vec<Item>>,
    /// `config.User`.
    pub user: String,
    /// `config.Labels`.
    pub labels: BTreeMap<String, String>,
    /// Config os/architecture.
    pub platform: (String, String),
}

impl Image {
    /// A clean image of the role's no-op module: runtime, empty mirror, user 65532, labels.
    pub fn clean(role: &str) -> Self {
        let mut base = vec![
            dir("/bin"),
            exe("/bin/tofu"),
            Item::Dir("/etc".into(), 0o755, 0, 0),
        ];
        base.push(file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\ncaptf:x:65532:65532::/home/captf:/bin/sh\n",
        ));
        let mut module = module_items(&noop(role));
        module.push(Item::Symlink("/captf/runtime".into(), "/bin/tofu".into()));
        module.push(dir("/captf/providers"));
        let labels = [
            ("io.captf.contract", "v1alpha1"),
            ("io.captf.role", role),
            ("io.captf.runtime", "tofu"),
            ("io.captf.runtime.version", "1.12.6"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        Self {
            layers: vec![base, module],
            user: "65532".into(),
            labels,
            platform: ("linux".into(), "amd64".into()),
        }
    }

    /// Sets a label.
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.labels.insert(k.to_owned(), v.to_owned());
        self
    }

    /// Adds a layer on top.
    pub fn layer(mut self, items: Vec<Item>) -> Self {
        self.layers.push(items);
        self
    }

    /// Sets the user.
    pub fn user(mut self, user: &str) -> Self {
        user.clone_into(&mut self.user);
        self
    }

    /// The image config document.
    pub fn config(&self) -> Value {
        json!({
            "architecture": self.platform.1,
            "os": self.platform.0,
            "config": { "User": self.user, "Labels": self.labels },
            "rootfs": { "type": "layers", "diff_ids": [] },
        })
    }

    /// Sets the config's platform.
    pub fn arch(mut self, arch: &str) -> Self {
        arch.clone_into(&mut self.platform.1);
        self
    }
}

fn digest(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

/// An image manifest document of a config and layers (descriptors).
pub fn manifest(config: &Value, layers: &[Value]) -> Value {
    json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": layers,
    })
}

/// An OCI layout being written.
#[derive(Debug)]
pub struct LayoutWriter {
    /// The layout directory.
    pub dir: PathBuf,
}

impl LayoutWriter {
    /// A new layout in `dir`.
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
        Self {
            dir: dir.to_path_buf(),
        }
    }

    /// Writes a blob; returns its descriptor.
    pub fn blob(&self, media_type: &str, data: &[u8]) -> Value {
        let d = digest(data);
        std::fs::write(
            self.dir
                .join("blobs/sha256")
                .join(d.trim_start_matches("sha256:")),
            data,
        )
        .unwrap();
        json!({ "mediaType": media_type, "digest": d, "size": data.len() })
    }

    /// Writes an image's layers; returns their descriptors.
    pub fn layers(&self, image: &Image) -> Vec<Value> {
        image
            .layers
            .iter()
            .map(|items| self.blob("application/vnd.oci.image.layer.v1.tar+gzip", &layer(items)))
            .collect()
    }

    /// Writes an image's layers, config and manifest; returns the manifest descriptor.
    pub fn image(&self, image: &Image) -> Value {
        let layers = self.layers(image);
        let config = self.blob(
            "application/vnd.oci.image.config.v1+json",
            &serde_json::to_vec(&image.config()).unwrap(),
        );
        self.blob(
            "application/vnd.oci.image.manifest.v1+json",
            &serde_json::to_vec(&manifest(&config, &layers)).unwrap(),
        )
    }

    /// Writes `index.json` listing the given descriptors.
    pub fn index(&self, manifests: &[Value]) {
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        });
        std::fs::write(
            self.dir.join("index.json"),
            serde_json::to_vec(&index).unwrap(),
        )
        .unwrap();
    }
}

/// Writes a single-image layout; returns `oci:DIR`.
pub fn single(dir: &Path, image: &Image) -> String {
    let w = LayoutWriter::new(dir);
    let mut desc = w.image(image);
    desc["annotations"] = json!({ "org.opencontainers.image.ref.name": "latest" });
    w.index(&[desc]);
    format!("oci:{}", dir.display())
}

/// Writes a multi-platform layout (an index blob referenced from `index.json`); returns `oci:DIR`.
pub fn multi(dir: &Path, images: &[(&str, Image)]) -> String {
    let w = LayoutWriter::new(dir);
    let entries: Vec<Value> = images
        .iter()
        .map(|(arch, image)| {
            let mut d = w.image(image);
            d["platform"] = json!({ "os": "linux", "architecture": arch });
            d
        })
        .collect();
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": entries,
    });
    let desc = w.blob(
        "application/vnd.oci.image.index.v1+json",
        &serde_json::to_vec(&index).unwrap(),
    );
    w.index(&[desc]);
    format!("oci:{}", dir.display())
}
