//! The user's service description, read at node start: `.proto` files compiled in pure Rust
//! by `protox` (include paths as protoc's `-I`; the well-known types are built in), or a
//! compiled descriptor set (`--protoset`: a `FileDescriptorSet`, as `protoc
//! --descriptor_set_out --include_imports` writes). The method named by `call` is looked up
//! in it; only unary methods are accepted.

use std::path::{Path, PathBuf};

use miette::Diagnostic;
use prost_reflect::{DescriptorPool, MethodDescriptor};

/// A descriptor set file larger than this is refused (it is read whole into memory; real
/// ones are kilobytes to a few megabytes).
pub const MAX_PROTOSET_BYTES: u64 = 64 << 20;
/// `.proto` files given at once, and include paths: a command line's worth.
pub const MAX_PROTO_FILES: usize = 256;

/// Where the descriptors come from.
#[derive(Debug, Clone)]
pub enum Source<'a> {
    /// `.proto` files, with the include paths their imports are found in.
    Protos {
        files: &'a [String],
        import_paths: &'a [String],
    },
    /// A `FileDescriptorSet` file.
    Protoset(&'a str),
}

/// The descriptors of `source`, or one line saying why not.
pub fn pool(source: &Source) -> Result<DescriptorPool, String> {
    match source {
        Source::Protoset(path) => protoset(path),
        Source::Protos { files, import_paths } => compile(files, import_paths),
    }
}

fn protoset(path: &str) -> Result<DescriptorPool, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("protoset {path}: {e}"))?
        .len();
    if len > MAX_PROTOSET_BYTES {
        return Err(format!(
            "protoset {path} is over {} MiB",
            MAX_PROTOSET_BYTES >> 20
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("protoset {path}: {e}"))?;
    DescriptorPool::decode(bytes.as_slice())
        .map_err(|e| format!("protoset {path}: not a FileDescriptorSet: {}", one_line(&e)))
}

/// Compiles `files`; each file's own folder is an include path after `import_paths` (as
/// ghz and grpcurl do), so a lone file needs none.
fn compile(files: &[String], import_paths: &[String]) -> Result<DescriptorPool, String> {
    if files.is_empty() || files.len() > MAX_PROTO_FILES || import_paths.len() > MAX_PROTO_FILES {
        return Err(format!(
            "give 1..={MAX_PROTO_FILES} .proto files and at most {MAX_PROTO_FILES} import paths"
        ));
    }
    let mut includes: Vec<PathBuf> = import_paths.iter().map(PathBuf::from).collect();
    for f in files {
        let path = Path::new(f);
        if !path.is_file() {
            return Err(format!("proto {f}: no such file"));
        }
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !includes.contains(&dir) {
            includes.push(dir);
        }
    }
    let mut compiler = protox::Compiler::new(&includes).map_err(|e| describe(&e))?;
    compiler.include_imports(true).include_source_info(false);
    for f in files {
        compiler.open_file(f).map_err(|e| describe(&e))?;
    }
    Ok(compiler.descriptor_pool())
}

/// protox's error in one line, with its place (`file:line:col`) when it has one.
fn describe(e: &protox::Error) -> String {
    let place = place(e).or_else(|| e.file().map(str::to_string));
    let text = one_line(e);
    match place {
        Some(p) => format!("proto {p}: {text}"),
        None => format!("proto: {text}"),
    }
}

/// `file:line:col` of a diagnostic's first label.
fn place(e: &dyn Diagnostic) -> Option<String> {
    let label = e.labels()?.next()?;
    let source = e.source_code()?;
    let span = source.read_span(label.inner(), 0, 0).ok()?;
    let name = span.name().map(str::to_string).or_else(|| Some("?".into()))?;
    Some(format!("{name}:{}:{}", span.line() + 1, span.column() + 1))
}

fn one_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The method `call` names: `package.Service/Method` (also `package.Service.Method`, as ghz
/// accepts), which must be unary.
pub fn method(pool: &DescriptorPool, call: &str) -> Result<MethodDescriptor, String> {
    let call = call.trim().trim_start_matches('/');
    let (service, name) = call
        .rsplit_once('/')
        .or_else(|| call.rsplit_once('.'))
        .filter(|(s, m)| !s.is_empty() && !m.is_empty())
        .ok_or_else(|| format!("call {call:?}: expected package.Service/Method"))?;
    let Some(svc) = pool.get_service_by_name(service) else {
        let known: Vec<String> = pool.services().map(|s| s.full_name().to_string()).collect();
        return Err(format!(
            "call {call}: no service {service} in the proto (it has: {})",
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        ));
    };
    let Some(m) = svc.methods().find(|m| m.name() == name) else {
        let known: Vec<String> = svc.methods().map(|m| m.name().to_string()).collect();
        return Err(format!(
            "call {call}: {service} has no method {name} (it has: {})",
            known.join(", ")
        ));
    };
    let streaming = match (m.is_client_streaming(), m.is_server_streaming()) {
        (false, false) => return Ok(m),
        (true, true) => "bidirectional streaming",
        (true, false) => "client streaming",
        (false, true) => "server streaming",
    };
    Err(format!(
        "call {call}: a {streaming} method; knee makes unary calls only"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!("knee-grpc-proto-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    const ECHO: &str = r#"
syntax = "proto3";
package knee.test;
import "google/protobuf/timestamp.proto";
message Req { string text = 1; int32 n = 2; google.protobuf.Timestamp at = 3; }
message Rep { string text = 1; }
service Echo {
  rpc Call(Req) returns (Rep);
  rpc Watch(Req) returns (stream Rep);
  rpc Upload(stream Req) returns (Rep);
  rpc Chat(stream Req) returns (stream Rep);
}
"#;

    fn echo_pool(name: &str) -> DescriptorPool {
        let d = dir();
        let f = d.join(name);
        std::fs::write(&f, ECHO).unwrap();
        let files = [f.to_string_lossy().into_owned()];
        pool(&Source::Protos {
            files: &files,
            import_paths: &[],
        })
        .unwrap()
    }

    #[test]
    fn a_proto_compiles_with_well_known_imports_and_finds_unary_methods() {
        let p = echo_pool("ok.proto");
        let m = method(&p, "knee.test.Echo/Call").unwrap();
        assert_eq!(m.input().full_name(), "knee.test.Req");
        assert_eq!(method(&p, "knee.test.Echo.Call").unwrap().name(), "Call");
        assert_eq!(method(&p, "/knee.test.Echo/Call").unwrap().name(), "Call");
    }

    #[test]
    fn unknown_and_streaming_methods_are_refused_in_one_line() {
        let p = echo_pool("methods.proto");
        for (call, words) in [
            (
                "knee.test.Nope/Call",
                "no service knee.test.Nope in the proto (it has: knee.test.Echo)",
            ),
            (
                "knee.test.Echo/Nope",
                "has no method Nope (it has: Call, Watch, Upload, Chat)",
            ),
            (
                "knee.test.Echo/Watch",
                "a server streaming method; knee makes unary calls only",
            ),
            ("knee.test.Echo/Upload", "a client streaming method"),
            ("knee.test.Echo/Chat", "a bidirectional streaming method"),
            ("Call", "expected package.Service/Method"),
        ] {
            let e = method(&p, call).unwrap_err();
            assert!(e.contains(words), "{call}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn a_proto_that_does_not_compile_says_where_in_one_line() {
        let d = dir();
        // The error of compiling one file, and a file written in the test's folder.
        let error = |file: &std::path::Path| {
            let files = [file.to_string_lossy().into_owned()];
            pool(&Source::Protos {
                files: &files,
                import_paths: &[],
            })
            .unwrap_err()
        };
        let write = |name: &str, text: &str| {
            let f = d.join(name);
            std::fs::write(&f, text).unwrap();
            f
        };
        let e = error(&write(
            "bad.proto",
            "syntax = \"proto3\";\nmessage A {\n  string x = 1\n}\n",
        ));
        assert!(e.starts_with("proto bad.proto:4:1:"), "{e}");
        assert!(!e.contains('\n'), "{e}");
        let e = error(&write(
            "imports.proto",
            "syntax = \"proto3\";\nimport \"missing.proto\";\n",
        ));
        assert!(e.contains("import 'missing.proto' not found"), "{e}");
        let e = error(std::path::Path::new("/nonexistent/x.proto"));
        assert_eq!(e, "proto /nonexistent/x.proto: no such file");
    }

    #[test]
    fn a_protoset_is_read_and_garbage_refused() {
        let d = dir();
        let f = d.join("set.proto");
        std::fs::write(&f, ECHO).unwrap();
        let mut c = protox::Compiler::new([&d]).unwrap();
        c.include_imports(true).open_file(&f).unwrap();
        let set = d.join("echo.protoset");
        std::fs::write(&set, c.encode_file_descriptor_set()).unwrap();
        let p = pool(&Source::Protoset(set.to_str().unwrap())).unwrap();
        assert!(method(&p, "knee.test.Echo/Call").is_ok());
        let junk = d.join("junk.protoset");
        std::fs::write(&junk, b"\xff\xff\xff not a descriptor set").unwrap();
        let e = pool(&Source::Protoset(junk.to_str().unwrap())).unwrap_err();
        assert!(e.contains("not a FileDescriptorSet"), "{e}");
    }
}
