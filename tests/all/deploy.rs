//! The deploy files (`deploy/Dockerfile`, `deploy/k8s/`) and the operator docs against
//! the real `mur`: every flag they pass is one `mur serve` takes, the ports and the probe
//! path agree with each other and with the route that answers them, and the image's user
//! and volume are the ones the pod runs as and mounts. Neither docker nor a cluster is
//! needed: the files are read as text and YAML.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use yaml_rust2::{Yaml, YamlLoader};

use crate::common::*;

/// How long `mur serve` drains when the command passes no `--drain-secs` (its default).
const DEFAULT_DRAIN_SECS: i64 = 10;

/// The final stage of `deploy/Dockerfile`: what the image is when it runs.
#[derive(Debug, Default)]
struct Image {
    user: String,
    expose: Vec<u16>,
    volumes: Vec<String>,
    env: BTreeMap<String, String>,
    entrypoint: Vec<String>,
    cmd: Vec<String>,
}

fn deploy_file(rel: &str) -> String {
    let path = repo().join("deploy").join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Dockerfile's instructions, continuation lines joined and comments dropped; each
/// `FROM` starts over, so what is left describes the last stage.
fn image() -> Image {
    let text = deploy_file("Dockerfile");
    let mut joined = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                if !current.trim().is_empty() {
                    joined.push(std::mem::take(&mut current));
                }
                current.clear();
            }
        }
    }
    let mut image = Image::default();
    for instruction in joined {
        let (keyword, rest) = instruction
            .trim()
            .split_once(char::is_whitespace)
            .unwrap_or((instruction.trim(), ""));
        let rest = rest.trim();
        match keyword.to_ascii_uppercase().as_str() {
            "FROM" => image = Image::default(),
            "USER" => image.user = rest.to_string(),
            "EXPOSE" => image.expose.extend(rest.split_whitespace().map(|p| {
                p.trim_end_matches("/tcp")
                    .parse::<u16>()
                    .unwrap_or_else(|e| panic!("EXPOSE {p}: {e}"))
            })),
            "VOLUME" => image.volumes.extend(if rest.starts_with('[') {
                exec_form("VOLUME", rest)
            } else {
                rest.split_whitespace().map(String::from).collect()
            }),
            "ENV" => {
                for pair in rest.split_whitespace() {
                    let (name, value) = pair
                        .split_once('=')
                        .unwrap_or_else(|| panic!("ENV {rest}: write NAME=value"));
                    image.env.insert(name.to_string(), value.to_string());
                }
            }
            "ENTRYPOINT" => image.entrypoint = exec_form("ENTRYPOINT", rest),
            "CMD" => image.cmd = exec_form("CMD", rest),
            _ => {}
        }
    }
    image
}

/// A JSON-array instruction. The shell form would not do: a shell-form ENTRYPOINT
/// ignores CMD and Kubernetes' `args`, and runs `mur` under `sh`, which does not pass on
/// the SIGTERM that starts the drain.
fn exec_form(keyword: &str, rest: &str) -> Vec<String> {
    serde_json::from_str(rest).unwrap_or_else(|e| {
        panic!("{keyword} {rest}: not the exec form, a JSON array of strings ({e})")
    })
}

fn yaml_docs(rel: &str) -> Vec<Yaml> {
    let text = deploy_file(rel);
    YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("deploy/{rel}: {e}"))
}

fn statefulset() -> Yaml {
    let mut docs = yaml_docs("k8s/statefulset.yaml");
    assert_eq!(docs.len(), 1, "statefulset.yaml holds one document");
    let set = docs.remove(0);
    assert_eq!(set["kind"].as_str(), Some("StatefulSet"));
    set
}

fn services() -> Vec<Yaml> {
    let docs = yaml_docs("k8s/service.yaml");
    for doc in &docs {
        assert_eq!(doc["kind"].as_str(), Some("Service"), "{doc:?}");
    }
    docs
}

/// The StatefulSet's one container.
fn container(set: &Yaml) -> &Yaml {
    let containers = set["spec"]["template"]["spec"]["containers"]
        .as_vec()
        .expect("spec.template.spec.containers is a list");
    assert_eq!(containers.len(), 1, "one container: mur");
    &containers[0]
}

fn strings(list: &Yaml, what: &str) -> Vec<String> {
    list.as_vec()
        .unwrap_or_else(|| panic!("{what} is a list: {list:?}"))
        .iter()
        .map(|item| {
            item.as_str()
                .unwrap_or_else(|| panic!("{what}: {item:?} is not a string (quote it)"))
                .to_string()
        })
        .collect()
}

fn int(value: &Yaml, what: &str) -> i64 {
    value
        .as_i64()
        .unwrap_or_else(|| panic!("{what} is a number: {value:?}"))
}

/// The value after `flag` in a command's words.
fn flag_value<'a>(words: &'a [String], flag: &str) -> Option<&'a str> {
    let at = words.iter().position(|w| w == flag)?;
    let value = words
        .get(at + 1)
        .unwrap_or_else(|| panic!("{flag} has no value in {words:?}"));
    Some(value.as_str())
}

/// The port `mur serve` listens on in the image's command.
fn serve_port(words: &[String]) -> i64 {
    let port = flag_value(words, "--port").expect("the command names --port");
    port.parse()
        .unwrap_or_else(|e| panic!("--port {port}: {e}"))
}

/// The container's ports: (name, number).
fn container_ports(container: &Yaml) -> Vec<(Option<String>, i64)> {
    container["ports"]
        .as_vec()
        .expect("the container lists its ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().map(String::from),
                int(&p["containerPort"], "containerPort"),
            )
        })
        .collect()
}

/// A probe's or a Service's target port: a number, or the name of a container port.
fn resolve_port(port: &Yaml, ports: &[(Option<String>, i64)]) -> i64 {
    match port {
        Yaml::Integer(n) => *n,
        Yaml::String(name) => {
            ports
                .iter()
                .find(|(n, _)| n.as_deref() == Some(name.as_str()))
                .unwrap_or_else(|| panic!("no container port is named {name:?}: {ports:?}"))
                .1
        }
        other => panic!("a port is a number or a name: {other:?}"),
    }
}

/// `mur <command> --help`, which must succeed.
fn help(command: &str) -> String {
    let run = finish(mur().args([command, "--help"]));
    run.assert_ok();
    run.stdout
}

/// Whether `help` lists `flag` itself, not merely a longer flag that starts with it.
fn names_flag(help: &str, flag: &str) -> bool {
    help.match_indices(flag).any(|(at, _)| {
        let before = help[..at].chars().next_back();
        let after = help[at + flag.len()..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '-')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
    })
}

fn flags(words: &[String]) -> Vec<&str> {
    words
        .iter()
        .filter(|w| w.starts_with("--"))
        .map(|w| w.split_once('=').map_or(w.as_str(), |(flag, _)| flag))
        .collect()
}

#[test]
fn the_image_and_the_statefulset_run_the_same_serve_command() {
    let image = image();
    assert_eq!(image.entrypoint, ["mur"], "the image's ENTRYPOINT");
    assert_eq!(
        image.cmd.first().map(String::as_str),
        Some("serve"),
        "CMD: {:?}",
        image.cmd
    );
    let set = statefulset();
    let container = container(&set);
    // No `command`: the image's ENTRYPOINT stays, and `args` take the place of CMD.
    assert!(
        container["command"].is_badvalue(),
        "the container keeps the image's ENTRYPOINT: {:?}",
        container["command"]
    );
    let args = strings(&container["args"], "the container's args");
    assert_eq!(
        args[..image.cmd.len()],
        image.cmd[..],
        "the StatefulSet's args start with the image's CMD"
    );
    // Each replica names itself in the addresses it hands out.
    assert_eq!(
        &args[image.cmd.len()..],
        ["--public-url", "http://$(POD_NAME).mur:8080"],
        "after the CMD, only the replica's own URL"
    );
    let env = &container["env"];
    let pod_name = env
        .as_vec()
        .into_iter()
        .flatten()
        .find(|e| e["name"].as_str() == Some("POD_NAME"))
        .expect("POD_NAME in the container's env");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name"),
        "POD_NAME is the pod's own name"
    );
}

#[test]
fn every_flag_the_deploy_files_pass_is_one_mur_serve_takes() {
    let help = help("serve");
    let image = image();
    let set = statefulset();
    let args = strings(&container(&set)["args"], "the container's args");
    for (what, words) in [
        ("the image's CMD", &image.cmd),
        ("the StatefulSet's args", &args),
    ] {
        assert!(!flags(words).is_empty(), "{what} passes no flag: {words:?}");
        for flag in flags(words) {
            assert!(
                names_flag(&help, flag),
                "{what} passes {flag}, which `mur serve --help` does not list:\n{help}"
            );
        }
        // Bound to loopback, the server would answer neither the probes nor the Services.
        assert_eq!(flag_value(words, "--bind"), Some("0.0.0.0"), "{what}");
    }
}

#[test]
fn the_probes_the_ports_and_the_services_agree() {
    let image = image();
    let port = serve_port(&image.cmd);
    assert!(
        image.expose.iter().any(|&p| i64::from(p) == port),
        "the image EXPOSEs {:?}, and mur serve listens on {port}",
        image.expose
    );

    let set = statefulset();
    let container = container(&set);
    let ports = container_ports(container);
    assert!(
        ports.iter().any(|&(_, p)| p == port),
        "the container declares {ports:?}, and mur serve listens on {port}"
    );
    let mut probes = 0;
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
        let probe = &container[kind];
        if probe.is_badvalue() {
            assert_ne!(kind, "readinessProbe", "the container has a readinessProbe");
            assert_ne!(kind, "livenessProbe", "the container has a livenessProbe");
            continue;
        }
        probes += 1;
        let http = &probe["httpGet"];
        assert_eq!(http["path"].as_str(), Some("/healthz"), "{kind}");
        assert_eq!(resolve_port(&http["port"], &ports), port, "{kind}'s port");
    }
    assert!(probes >= 2);

    let labels = set["spec"]["template"]["metadata"]["labels"]
        .as_hash()
        .expect("the pod template has labels");
    let mut headless = Vec::new();
    let mut cluster_ports = Vec::new();
    for service in services() {
        let name = service["metadata"]["name"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let selector = service["spec"]["selector"]
            .as_hash()
            .unwrap_or_else(|| panic!("Service {name} has a selector"));
        for (key, value) in selector {
            assert_eq!(
                labels.get(key),
                Some(value),
                "Service {name} selects {key:?}: {value:?}, which the pods do not carry"
            );
        }
        let service_ports = service["spec"]["ports"]
            .as_vec()
            .unwrap_or_else(|| panic!("Service {name} lists ports"));
        for p in service_ports {
            // An unset targetPort means the port itself.
            let target = if p["targetPort"].is_badvalue() {
                &p["port"]
            } else {
                &p["targetPort"]
            };
            assert_eq!(
                resolve_port(target, &ports),
                port,
                "Service {name} targets the container's port"
            );
        }
        if service["spec"]["clusterIP"].as_str() == Some("None") {
            headless.push(name);
        } else {
            cluster_ports.extend(service_ports.iter().map(|p| int(&p["port"], "port")));
        }
    }
    let service_name = set["spec"]["serviceName"]
        .as_str()
        .expect("the StatefulSet names its Service");
    assert_eq!(
        headless,
        [service_name],
        "the StatefulSet's serviceName is its headless Service, which names each replica"
    );
    assert_eq!(
        cluster_ports,
        [80],
        "the ClusterIP Service listens on port 80"
    );
}

#[test]
fn the_pod_gives_a_drain_the_time_to_finish() {
    let set = statefulset();
    let args = strings(&container(&set)["args"], "the container's args");
    let drain = flag_value(&args, "--drain-secs").map_or(DEFAULT_DRAIN_SECS, |s| {
        s.parse()
            .unwrap_or_else(|e| panic!("--drain-secs {s}: {e}"))
    });
    let grace = int(
        &set["spec"]["template"]["spec"]["terminationGracePeriodSeconds"],
        "terminationGracePeriodSeconds",
    );
    assert!(
        grace > drain,
        "terminationGracePeriodSeconds ({grace}) must exceed the drain ({drain} s), or the \
         kubelet kills mur midway"
    );
    let liveness = &container(&set)["livenessProbe"];
    let period = liveness["periodSeconds"].as_i64().unwrap_or(10);
    let failures = liveness["failureThreshold"].as_i64().unwrap_or(3);
    assert!(
        period * failures > drain,
        "a liveness probe failing for {} s would restart a replica still draining ({drain} s)",
        period * failures
    );
}

#[test]
fn the_pod_runs_as_the_images_user_and_mounts_its_volume() {
    let image = image();
    let (uid, gid) = image
        .user
        .split_once(':')
        .unwrap_or((image.user.as_str(), image.user.as_str()));
    // runAsNonRoot can only check a numeric USER; a name makes the kubelet refuse the pod.
    let uid: i64 = uid
        .parse()
        .unwrap_or_else(|_| panic!("the image's USER is numeric: {:?}", image.user));
    let gid: i64 = gid
        .parse()
        .unwrap_or_else(|_| panic!("the image's group is numeric: {:?}", image.user));
    assert_ne!(uid, 0, "the image runs as a user other than root");

    let set = statefulset();
    let pod = &set["spec"]["template"]["spec"];
    let security = &pod["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true));
    assert_eq!(security["runAsUser"].as_i64(), Some(uid), "runAsUser");
    // The volume is writable by the image's user only through fsGroup.
    assert_eq!(security["fsGroup"].as_i64(), Some(gid), "fsGroup");

    let data = flag_value(&image.cmd, "--data").expect("the image's command names --data");
    assert_eq!(
        image.volumes,
        [data],
        "the image's VOLUME is mur serve's --data"
    );
    if let Some(cache) = image.env.get("MUR_CACHE_DIR") {
        assert!(
            Path::new(cache).starts_with(data),
            "MUR_CACHE_DIR ({cache}) is on the volume ({data})"
        );
    }

    let mounts = container(&set)["volumeMounts"]
        .as_vec()
        .expect("the container mounts its volume");
    let mount = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(data))
        .unwrap_or_else(|| panic!("nothing is mounted at --data ({data}): {mounts:?}"));
    let claim = mount["name"].as_str().expect("the mount names its volume");
    let claims: Vec<&str> = set["spec"]["volumeClaimTemplates"]
        .as_vec()
        .expect("the StatefulSet has volumeClaimTemplates")
        .iter()
        .filter_map(|t| t["metadata"]["name"].as_str())
        .collect();
    assert!(
        claims.contains(&claim),
        "the volume mounted at {data} ({claim}) is one of the volumeClaimTemplates: {claims:?}"
    );
}

#[test]
fn the_kustomization_lists_every_manifest_and_names_the_image() {
    let docs = yaml_docs("k8s/kustomization.yaml");
    let kustomization = docs.first().expect("kustomization.yaml holds a document");
    let listed: BTreeSet<String> = strings(&kustomization["resources"], "resources")
        .into_iter()
        .collect();
    let dir = repo().join("deploy").join("k8s");
    let present: BTreeSet<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    assert_eq!(listed, present, "kustomization.yaml's resources");

    let set = statefulset();
    let image = container(&set)["image"]
        .as_str()
        .expect("the container names its image");
    let name = image.rsplit_once(':').map_or(image, |(name, _)| name);
    let images = kustomization["images"]
        .as_vec()
        .expect("kustomization.yaml sets the image");
    assert!(
        images.iter().any(|i| i["name"].as_str() == Some(name)),
        "kustomization.yaml's images name the StatefulSet's image ({name}): {images:?}"
    );
}

/// `mur serve` in the background, killed when dropped.
struct Server {
    child: Child,
    launch: Value,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data: &Path) -> Server {
    let mut child = mur()
        .args([
            "serve",
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--json",
            "--data",
        ])
        .arg(data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mur serve starts");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(LIMIT).unwrap_or_default();
    if line.is_empty() {
        let _ = child.kill();
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let _ = child.wait();
        panic!("mur serve printed no launch line; stderr:\n{err}");
    }
    let launch = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("the launch line is not JSON ({e}): {line:?}"));
    Server { child, launch }
}

/// `GET path` on `address` (HOST:PORT): the status line and the body.
fn get(address: &str, path: &str) -> (String, String) {
    let mut socket = TcpStream::connect(address).unwrap();
    socket
        .write_all(
            format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n")
                .as_bytes(),
        )
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head.lines().find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().ok())?
            });
            if length.is_some_and(|n| body.len() >= n) {
                let status = head.lines().next().unwrap_or_default().to_string();
                return (status, body.to_string());
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no whole answer to GET {path} within {LIMIT:?}: {text:?}"
        );
        socket
            .set_read_timeout(Some(left.min(Duration::from_secs(30))))
            .unwrap();
        match socket.read(&mut chunk) {
            Ok(0) => {
                let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
                let status = head.lines().next().unwrap_or_default().to_string();
                return (status, body.to_string());
            }
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading the answer to GET {path}: {e}; read: {text:?}"),
        }
    }
}

#[test]
fn the_probe_path_answers_ok_and_the_admin_token_is_where_the_docs_read_it() {
    let set = statefulset();
    let probe_path = container(&set)["readinessProbe"]["httpGet"]["path"]
        .as_str()
        .expect("the readiness probe names its path")
        .to_string();
    let data = scratch("deploy-serve").join("data");
    let server = serve(&data);
    let address = server.launch["address"]
        .as_str()
        .unwrap_or_else(|| panic!("the launch line names the address: {}", server.launch))
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let (status, body) = get(&address, &probe_path);
    assert_eq!(
        status, "HTTP/1.1 200 OK",
        "GET {probe_path}; body: {body:?}"
    );
    assert_eq!(body, "ok\n");

    // deploy/README.md reads the token from <--data>/admin-token.
    let token_file = PathBuf::from(
        server.launch["admin_token_file"]
            .as_str()
            .expect("the launch line names the admin token's file"),
    );
    let expected = data.join("admin-token");
    assert_eq!(
        token_file.canonicalize().unwrap(),
        expected
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", expected.display())),
    );
}

/// The flags of each `mur serve` and `mur watch` in the fenced blocks of a document:
/// (line, subcommand, flags).
fn documented_commands(text: &str) -> Vec<(String, String, Vec<String>)> {
    let mut found = Vec::new();
    let mut fenced = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            pending.clear();
            continue;
        }
        if !fenced {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            continue;
        }
        let whole = std::mem::take(&mut pending) + line;
        let words: Vec<&str> = whole.split_whitespace().collect();
        for (at, pair) in words.windows(2).enumerate() {
            let [program, sub] = pair else { continue };
            if *program != "mur" || !matches!(*sub, "serve" | "watch") {
                continue;
            }
            let flags = words[at + 2..]
                .iter()
                .take_while(|w| {
                    !matches!(**w, "|" | "||" | "&&" | ";" | "&") && !w.starts_with('#')
                })
                .map(|w| w.trim_start_matches('[').trim_end_matches(']'))
                .filter(|w| w.starts_with("--"))
                .map(|w| w.split_once('=').map_or(w, |(flag, _)| flag).to_string())
                .collect();
            found.push((whole.trim().to_string(), sub.to_string(), flags));
        }
    }
    found
}

#[test]
fn the_commands_the_operator_docs_show_take_only_flags_mur_has() {
    let docs = ["README.md", "deploy/README.md"];
    let mut helps = BTreeMap::new();
    let mut serve_commands = 0;
    for doc in docs {
        let path = repo().join(doc);
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for (line, sub, flags) in documented_commands(&text) {
            if sub == "serve" {
                serve_commands += 1;
            }
            let help = helps.entry(sub.clone()).or_insert_with(|| help(&sub));
            for flag in flags {
                assert!(
                    names_flag(help, &flag),
                    "{doc}: `{line}` passes {flag}, which `mur {sub} --help` does not list:\n{help}"
                );
            }
        }
    }
    assert!(
        serve_commands > 0,
        "the operator docs show how to start mur serve ({docs:?})"
    );
}
