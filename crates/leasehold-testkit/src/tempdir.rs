use std::path::{Path, PathBuf};

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), label)
    }

    /// A directory under `base` (a RAM file system for a database's data, say).
    pub fn new_in(base: &Path, label: &str) -> TempDir {
        let path = base.join(format!("leasehold-test-{}", crate::unique_key(label)));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `file:///…` for this directory.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.0.display())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
