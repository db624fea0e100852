//! Locating `java`/`javac`/`mvn`, resolving the RocketMQ jars with Maven into a per-version cache
//! folder, and compiling the Java helpers of `tests/java/`.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use super::{HarnessError, Version};

/// What to install when a tool is missing (Debian/Ubuntu package names).
pub(crate) const INSTALL_HINT: &str = "the real-broker tests need a JDK (17 recommended) and Maven: \
     install them with `apt-get install openjdk-17-jdk-headless maven` (or put `java`, `javac` and \
     `mvn` on PATH / set JAVA_HOME). These tests never skip silently.";

/// Serialises Maven and javac runs inside one test process (two tests starting at once would
/// otherwise both download the same folder).
static PREPARE_LOCK: Mutex<()> = Mutex::new(());

/// Which jar set of a version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// `rocketmq-namesrv` + `rocketmq-broker` with their dependencies.
    Server,
    /// `rocketmq-client` + `rocketmq-tools` with their dependencies.
    Client,
    /// `rocketmq-proxy` with its dependencies (5.x only: the 4.9 line has no proxy).
    Proxy,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Part::Server => "server",
            Part::Client => "client",
            Part::Proxy => "proxy",
        }
    }
}

/// A JDK binary (`java`, `javac`): `$JAVA_HOME/bin/<name>` if `JAVA_HOME` is set, else PATH.
pub(crate) fn jdk_tool(name: &str) -> PathBuf {
    match std::env::var_os("JAVA_HOME") {
        Some(home) if !home.is_empty() => Path::new(&home).join("bin").join(name),
        _ => PathBuf::from(name),
    }
}

/// Fails with an install hint unless `tool <version_arg>` runs.
pub(crate) fn require_tool(tool: &Path, version_arg: &str) -> Result<(), HarnessError> {
    match Command::new(tool)
        .arg(version_arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(HarnessError::new(format!(
            "`{} {version_arg}` exited with {s}; {INSTALL_HINT}",
            tool.display()
        ))),
        Err(e) if e.kind() == ErrorKind::NotFound => Err(HarnessError::new(format!(
            "`{}` not found; {INSTALL_HINT}",
            tool.display()
        ))),
        Err(e) => Err(HarnessError::new(format!(
            "cannot run `{}`: {e}; {INSTALL_HINT}",
            tool.display()
        ))),
    }
}

/// The Cargo target directory of the running test binary (`<target>/<profile>/deps/<bin>`), or
/// `<workspace>/target` when that layout is not recognised.
pub(crate) fn target_dir() -> PathBuf {
    if let Ok(exe) = std::env::current_exe()
        && let Some(deps) = exe.parent()
        && deps.file_name().is_some_and(|n| n == "deps")
        && let Some(target) = deps.parent().and_then(Path::parent)
    {
        return target.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
}

/// Root of the jar and class-file cache: `$RMQ_CACHE_DIR` or `<target>/rocketmq`.
pub(crate) fn cache_root() -> PathBuf {
    match std::env::var_os("RMQ_CACHE_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => target_dir().join("rocketmq"),
    }
}

fn complete_marker(dir: &Path) -> PathBuf {
    dir.join(".complete")
}

fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Makes `dst` hold what `fill(tmp)` produced, atomically: fill a temporary sibling folder,
/// write the completion marker, rename. A concurrent process that wins the rename race is fine.
fn build_once(
    dst: &Path,
    fill: impl FnOnce(&Path) -> Result<(), HarnessError>,
) -> Result<(), HarnessError> {
    if complete_marker(dst).is_file() {
        return Ok(());
    }
    let parent = dst.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent)
        .map_err(|e| HarnessError::new(format!("create {}: {e}", parent.display())))?;
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.tmp-{}", unique_suffix()));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)
        .map_err(|e| HarnessError::new(format!("create {}: {e}", tmp.display())))?;
    let result = fill(&tmp).and_then(|()| {
        fs::write(complete_marker(&tmp), b"ok\n")
            .map_err(|e| HarnessError::new(format!("write marker in {}: {e}", tmp.display())))
    });
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dst.exists() && !complete_marker(dst).is_file() {
        // An incomplete leftover of an interrupted run.
        let _ = fs::remove_dir_all(dst);
    }
    if fs::rename(&tmp, dst).is_err() {
        let _ = fs::remove_dir_all(&tmp);
        if !complete_marker(dst).is_file() {
            return Err(HarnessError::new(format!(
                "could not install {}",
                dst.display()
            )));
        }
    }
    Ok(())
}

/// The folder holding every jar of `part` for `version`, downloading it with Maven when it is
/// missing or incomplete: `<cache>/lib-<version>/<part>/`.
pub(crate) fn lib_dir(version: Version, part: Part) -> Result<PathBuf, HarnessError> {
    let artifact_version = version.name();
    if part == Part::Proxy && version.is_v4() {
        return Err(HarnessError::new(format!(
            "no rocketmq-proxy for RocketMQ {artifact_version}: the proxy is a 5.x component \
             (it first shipped with 5.0.0); start a 5.3.3 cluster to use it"
        )));
    }
    let dst = cache_root()
        .join(format!("lib-{}", version.name()))
        .join(part.name());
    if complete_marker(&dst).is_file() {
        return Ok(dst);
    }
    let _guard = PREPARE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mvn = PathBuf::from("mvn");
    require_tool(&mvn, "-v")?;
    let pom = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("broker")
        .join("pom.xml");
    let build_dir = cache_root().join("mvn-build");
    build_once(&dst, |tmp| {
        let out = Command::new(&mvn)
            .arg("-B")
            .arg("-q")
            .arg("-f")
            .arg(&pom)
            .arg("package")
            .arg(format!("-P{}", part.name()))
            .arg(format!("-Drmq.version={artifact_version}"))
            .arg(format!("-Dlib.dir={}", tmp.display()))
            .arg(format!("-Drmq.build.dir={}", build_dir.display()))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::new(format!("cannot run mvn: {e}; {INSTALL_HINT}")))?;
        let jar = match part {
            Part::Server => format!("rocketmq-broker-{artifact_version}.jar"),
            Part::Client => format!("rocketmq-client-{artifact_version}.jar"),
            Part::Proxy => format!("rocketmq-proxy-{artifact_version}.jar"),
        };
        if !out.status.success() || !tmp.join(&jar).is_file() {
            return Err(HarnessError::new(format!(
                "mvn could not resolve RocketMQ {artifact_version} ({} jars) from Maven Central \
                 (exit {}; {jar} present: {}). Maven output:\n{}{}",
                part.name(),
                out.status,
                tmp.join(&jar).is_file(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    })?;
    Ok(dst)
}

/// The `-cp` value for every jar in `dir`.
pub(crate) fn classpath_of(dir: &Path) -> String {
    format!("{}/*", dir.display())
}

fn fnv1a(data: &[u8], mut h: u64) -> u64 {
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Compiles `tests/java/*.java` against the client jars of `version`; the class files are cached
/// under `<cache>/java-<version>-<hash of the sources>/`.
pub(crate) fn java_classes(version: Version) -> Result<PathBuf, HarnessError> {
    let src_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("java");
    let mut sources: Vec<PathBuf> = fs::read_dir(&src_dir)
        .map_err(|e| HarnessError::new(format!("read {}: {e}", src_dir.display())))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "java"))
        .collect();
    sources.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for s in &sources {
        let text =
            fs::read(s).map_err(|e| HarnessError::new(format!("read {}: {e}", s.display())))?;
        hash = fnv1a(
            s.file_name()
                .map(|n| n.as_encoded_bytes())
                .unwrap_or_default(),
            hash,
        );
        hash = fnv1a(&text, hash);
    }
    let dst = cache_root().join(format!("java-{}-{hash:016x}", version.name()));
    if complete_marker(&dst).is_file() {
        return Ok(dst);
    }
    let client = lib_dir(version, Part::Client)?;
    let _guard = PREPARE_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let javac = jdk_tool("javac");
    require_tool(&javac, "-version")?;
    build_once(&dst, |tmp| {
        let out = Command::new(&javac)
            .arg("-nowarn")
            .arg("-encoding")
            .arg("UTF-8")
            .arg("-cp")
            .arg(classpath_of(&client))
            .arg("-d")
            .arg(tmp)
            .args(&sources)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| HarnessError::new(format!("cannot run javac: {e}; {INSTALL_HINT}")))?;
        if !out.status.success() {
            return Err(HarnessError::new(format!(
                "javac failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    })?;
    Ok(dst)
}
