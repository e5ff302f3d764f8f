//! Reading text and TOML files of a bundle with errors that name file and field.

use std::fs;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::BundleError;

/// Read a required UTF-8 file.
pub fn read_text(path: &Path) -> Result<String, BundleError> {
    // trusted: files the operator named (prompts, settings)
    let bytes = fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            BundleError::invalid(path, None, "required file is missing")
        } else {
            BundleError::io(path)(e)
        }
    })?;
    into_utf8(path, bytes)
}

/// Read an optional UTF-8 file (`None` when absent).
pub fn read_text_opt(path: &Path) -> Result<Option<String>, BundleError> {
    // trusted: files the operator named (prompts, settings)
    match fs::symlink_metadata(path) {
        Ok(_) => read_text(path).map(Some),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(BundleError::io(path)(e)),
    }
}

/// Convert bytes to a string, naming the byte offset of bad UTF-8.
pub fn into_utf8(path: &Path, bytes: Vec<u8>) -> Result<String, BundleError> {
    String::from_utf8(bytes).map_err(|e| {
        BundleError::invalid(
            path,
            None,
            format!(
                "not valid UTF-8 text (first bad byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// Parse TOML into `T`, naming the dotted path of a field with a wrong type.
pub fn parse_toml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, BundleError> {
    let de = toml::Deserializer::parse(text)
        .map_err(|e| BundleError::invalid(path, None, e.to_string().trim().to_string()))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = (field != ".").then_some(field);
        BundleError::invalid(path, field.as_deref(), inner.trim().to_string())
    })
}

/// Parse JSON into `T`, naming the field path on error.
pub fn parse_json<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, BundleError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = (field != ".").then_some(field);
        BundleError::invalid(path, field.as_deref(), inner)
    })
}

/// Parse YAML into `T`, naming the field path on error.
pub fn parse_yaml<T: DeserializeOwned>(path: &Path, text: &str) -> Result<T, BundleError> {
    let de = serde_yaml::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let field = e.path().to_string();
        let inner = e.into_inner().to_string();
        let field = (field != ".").then_some(field);
        BundleError::invalid(path, field.as_deref(), inner)
    })
}
