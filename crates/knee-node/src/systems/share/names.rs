//! File names: validated before anything touches the disk, and opened so that a peer never
//! serves a path outside its shared folder.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Longest name accepted (bytes), the usual file-name limit of Linux file systems.
pub const MAX_NAME_BYTES: usize = 255;

/// A name is one plain file name of the shared folder: no NUL, no `/`, not `.` or `..`,
/// 1..=255 bytes of UTF-8. The error says which rule was broken.
pub fn check_name(raw: &[u8]) -> Result<&str, String> {
    if raw.is_empty() {
        return Err("empty file name".into());
    }
    if raw.len() > MAX_NAME_BYTES {
        return Err(format!(
            "file name of {} bytes exceeds the limit of {MAX_NAME_BYTES}",
            raw.len()
        ));
    }
    if raw.contains(&0) {
        return Err("file name contains a NUL byte".into());
    }
    let name = std::str::from_utf8(raw).map_err(|_| "file name is not UTF-8".to_string())?;
    if name.starts_with('/') {
        return Err(format!("absolute path refused: {name:?}"));
    }
    if name.split('/').any(|part| part == "..") {
        return Err(format!("file name contains '..': {name:?}"));
    }
    if name.contains('/') || name == "." {
        return Err(format!("not a plain file name of the shared folder: {name:?}"));
    }
    Ok(name)
}

/// Opens `name` in the shared folder `dir` (already canonical). Symlinks are resolved and
/// must stay inside the folder; the final open uses O_NOFOLLOW on the resolved path.
pub fn open_shared(dir: &Path, name: &str) -> Result<File, String> {
    let joined = dir.join(name);
    let resolved = joined.canonicalize().map_err(|e| format!("{name:?}: {e}"))?;
    if !resolved.starts_with(dir) {
        return Err(format!("{name:?} resolves outside the shared folder"));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&resolved)
        .map_err(|e| format!("{name:?}: {e}"))?;
    let meta = file.metadata().map_err(|e| format!("{name:?}: {e}"))?;
    if !meta.is_file() {
        return Err(format!("{name:?} is not a regular file"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_every_bad_name_with_its_reason() {
        assert!(check_name(b"f0-0001.bin").is_ok());
        for (raw, why) in [
            (&b""[..], "empty"),
            (b"../etc/passwd", "'..'"),
            (b"..", "'..'"),
            (b"/etc/passwd", "absolute"),
            (b"a\0b", "NUL"),
            (b"a/b", "plain file name"),
            (b"\xff\xfe", "UTF-8"),
        ] {
            let err = check_name(raw).unwrap_err();
            assert!(err.contains(why), "{raw:?}: {err}");
        }
        assert!(check_name(&[b'a'; 256]).unwrap_err().contains("exceeds"));
        assert!(check_name(&[b'a'; 255]).is_ok());
    }
}
