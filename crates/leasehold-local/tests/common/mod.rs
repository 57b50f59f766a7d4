//! What the tests share: private temporary lock directories.

/// A new directory under the system temp dir (mode 0700, as the backend wants), removed on drop.
pub fn temp_dir(label: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("leasehold-test-{label}-"))
        .tempdir()
        .expect("create a temp dir")
}

/// `file:///…` for a directory.
pub trait FileUrl {
    fn file_url(&self) -> String;
}

impl FileUrl for tempfile::TempDir {
    fn file_url(&self) -> String {
        format!("file://{}", self.path().display())
    }
}
