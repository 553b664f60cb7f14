//! A real OTLP receiver for the telemetry tests: Arize Phoenix (`arize-phoenix` from
//! PyPI, every package it pulls in pinned), installed once per repository into the
//! virtualenv `target/phoenix/venv` the way the SDKs are (see `sdk`), and started per
//! test on loopback ports of its own, with its own working folder and SQLite database.
//! Spans go in over OTLP/HTTP and are read back through Phoenix's own REST API, so a
//! test sees what a user of Phoenix would see.
//!
//! ```ignore
//! let Some(phoenix) = Phoenix::start() else { return };  // a skip, reason printed
//! // mur runs with OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.endpoint() and
//! // OTEL_RESOURCE_ATTRIBUTES=openinference.project.name=<project> ...
//! let spans = phoenix.eventually_spans(project, |s| s.len() >= 3, Duration::from_secs(30));
//! let tree = SpanTree::new(spans);
//! let agent = tree.one("invoke_agent probe");
//! assert_eq!(tree.child_names(agent), ["chat m", "execute_tool bash", "chat m"]);
//! ```
//!
//! What Phoenix does with what it is sent (as read in its source and checked by
//! `phoenix_harness`):
//!
//! - `POST <endpoint>/v1/traces` takes only `content-type: application/x-protobuf`,
//!   exactly: OTLP JSON, and even a parameter (`; charset=...`), is a `415`. A body may be
//!   `content-encoding: gzip` or `deflate` (anything else is a `415`); no header beyond
//!   those is needed (no authentication: it is off by default). It answers `200` with an
//!   empty protobuf `ExportTraceServiceResponse` before it stores anything: the spans
//!   are queued and written about a second later, hence [`Phoenix::eventually_spans`].
//!   `/v1/traces/` (a trailing slash) is a `405`.
//! - The project of a span is, in this order: the request header `x-project-name`
//!   ([`PROJECT_HEADER`]), else the resource attribute `openinference.project.name`
//!   ([`PROJECT_ATTRIBUTE`], so `OTEL_RESOURCE_ATTRIBUTES=openinference.project.name=x`
//!   works), else `default` ([`DEFAULT_PROJECT`]). A project exists once a span named
//!   it; before that its spans are a `404`, which [`Phoenix::spans`] reads as none.
//! - Resource attributes themselves (`service.name`, ...) are not kept, nor is the span
//!   kind of OTLP (server, client, ...) or the instrumentation scope.
//! - Spans with `gen_ai.*` attributes get OpenInference ones synthesized beside them
//!   (never replacing one the span carries): `gen_ai.operation.name` `chat` makes the
//!   span's `span_kind` `LLM` (and adds `llm.model_name`, `llm.token_count.prompt`, ...),
//!   `execute_tool` makes it `TOOL`, `invoke_agent` `AGENT`; without any, `UNKNOWN`.
//!   `openinference.span.kind` is the field `span_kind`, not an attribute.
//!
//! A span as `GET /v1/projects/{project}/spans` returns it:
//!
//! ```json
//! {"id": "U3Bhbjox", "name": "chat m",
//!  "context": {"trace_id": "263e80f53abe766ed5eec851b0068341", "span_id": "317365887904abb6"},
//!  "span_kind": "LLM", "parent_id": "782dcea492c8d70b",
//!  "start_time": "2026-12-07T14:15:26.437709+00:00", "end_time": "2026-12-07T14:15:26.437726+00:00",
//!  "status_code": "UNSET", "status_message": "",
//!  "attributes": {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
//!                 "gen_ai.usage.input_tokens": 7, "llm.model_name": "m", "llm.token_count.prompt": 7},
//!  "events": []}
//! ```
//!
//! Ids are lowercase hex; `parent_id` is `null` for a root; `status_code` is `UNSET`,
//! `OK` or `ERROR`; attributes are flat dotted keys with their JSON values (an array
//! stays an array); an event is `{"name", "timestamp", "attributes"}`.
//!
//! An install that cannot happen (no `python3`, no index) skips the tests that need it,
//! printing why, unless `MUR_REQUIRE_SDKS` is set: then it fails them. Once installed,
//! a Phoenix that does not start fails the test, with the end of its log.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::sdk::{Lock, REQUIRED, Snippet, required, run_within, venv_install};
use super::{raw_request, repo, scratch};

/// The resource attribute that names a span's project in Phoenix (OpenInference's
/// `ResourceAttributes.PROJECT_NAME`), unless [`PROJECT_HEADER`] names one.
pub const PROJECT_ATTRIBUTE: &str = "openinference.project.name";
/// The request header of `POST /v1/traces` that names the project of all its spans,
/// over [`PROJECT_ATTRIBUTE`].
pub const PROJECT_HEADER: &str = "x-project-name";
/// The project of spans that name none.
pub const DEFAULT_PROJECT: &str = "default";

/// `arize-phoenix` and everything it needs, as `pip freeze` listed them for
/// `arize-phoenix==20.26.1` on Python 3.11. The OTLP client the harness test sends
/// with (`opentelemetry-sdk`, `opentelemetry-exporter-otlp-proto-http`) is among them.
const PACKAGES: &[&str] = &[
    "aiofile==3.12.3",
    "aioitertools==0.13.0",
    "aiosqlite==0.22.1",
    "alembic==1.20.1",
    "annotated-doc==0.0.7",
    "annotated-types==0.8.0",
    "anthropic==1.17.0",
    "anyio==4.16.0",
    "arize-phoenix==20.26.1",
    "arize-phoenix-client==3.5.0",
    "arize-phoenix-evals==3.9.4",
    "arize-phoenix-otel==0.17.2",
    "arize-phoenix-sqlean==0.2.1",
    "attrs==26.1.0",
    "Authlib==1.9.10",
    "bashkit==0.20.1",
    "beartype==0.23.1",
    "boto3==1.44.18",
    "botocore==1.44.18",
    "cachetools==8.0.3",
    "caio==0.12.10",
    "certifi==2026.10.19.post1",
    "cffi==2.1.1",
    "charset-normalizer==3.5.3",
    "click==8.5.1",
    "cross-web==0.9.0",
    "cryptography==51.0.1",
    "cyclopts==5.5.2",
    "distro==1.9.0",
    "dnspython==2.9.2",
    "docstring_parser==0.18.0",
    "email-validator==2.4.0",
    "exceptiongroup==1.3.2",
    "fastapi==0.165.0",
    "fastmcp-slim==4.2.3",
    "genai-prices==0.2.5",
    "google-auth==2.63.1",
    "google-genai==2.34.0",
    "googleapis-common-protos==1.76.0",
    "graphql-core==3.3.2",
    "greenlet==3.5.6",
    "griffelib==2.4.1",
    "grpc-interceptor==0.15.4",
    "grpcio==1.85.4",
    "h11==0.16.0",
    "h2==4.4.1",
    "hpack==4.2.0",
    "httpcore==1.0.9",
    "httpcore2==2.17.0",
    "httpx==0.29.0",
    "httpx2==2.17.0",
    "hyperframe==6.1.0",
    "idna==3.21",
    "Jinja2==3.1.6",
    "jiter==0.19.0",
    "jmespath==1.1.0",
    "joserfc==1.8.0",
    "jsonpath-ng==1.17.0",
    "jsonref==1.1.0",
    "jsonschema==4.26.0",
    "jsonschema-path==0.5.0",
    "jsonschema-specifications==2025.9.1",
    "ldap3==2.9.1",
    "logfire-api==6.1.0",
    "Mako==1.4.3",
    "markdown-it-py==4.3.0",
    "MarkupSafe==3.0.4",
    "mcp==2.3.0",
    "mcp-types==2.3.0",
    "mdurl==0.1.2",
    "numpy==2.4.6",
    "openai==3.63.0",
    "openapi-pydantic==0.6.0",
    "openinference-instrumentation==0.1.72",
    "openinference-instrumentation-openai==0.1.66",
    "openinference-semantic-conventions==0.1.42",
    "opentelemetry-api==1.45.2",
    "opentelemetry-exporter-http-transport==0.66b2",
    "opentelemetry-exporter-otlp==1.45.2",
    "opentelemetry-exporter-otlp-common==0.66b2",
    "opentelemetry-exporter-otlp-proto-common==1.45.2",
    "opentelemetry-exporter-otlp-proto-grpc==1.45.2",
    "opentelemetry-exporter-otlp-proto-http==1.45.2",
    "opentelemetry-instrumentation==0.66b2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "orjson==3.13.0",
    "packaging==26.4",
    "pandas==3.1.1",
    "pathable==0.6.0",
    "platformdirs==4.14.9",
    "prometheus_client==0.26.0",
    "protobuf==7.36.2",
    "psutil==7.2.2",
    "py-key-value-aio==0.5.0",
    "pyarrow==26.0.1",
    "pyasn1==0.6.5",
    "pyasn1_modules==0.4.2",
    "pycparser==3.12",
    "pydantic==2.14.4",
    "pydantic-ai-slim==2.78.0",
    "pydantic-graph==2.78.0",
    "pydantic-monty==1.1.0",
    "pydantic-monty-client==1.1.0",
    "pydantic-monty-runtime==1.1.0",
    "pydantic-settings==2.16.3",
    "pydantic_core==2.50.5",
    "Pygments==2.21.0",
    "PyJWT==2.15.1",
    "pyperclip==1.11.0",
    "pystache==0.6.8",
    "python-dateutil==2.9.0.post0",
    "python-dotenv==1.2.4",
    "python-multipart==0.0.34",
    "PyYAML==6.0.4",
    "referencing==0.37.0",
    "regex==2026.12.2",
    "requests==2.34.2",
    "rich==15.0.0",
    "rich-rst==2.2.0",
    "rpds-py==2026.9.1",
    "s3transfer==0.19.3",
    "six==1.17.0",
    "sniffio==1.3.1",
    "snowballstemmer==3.1.1",
    "SQLAlchemy==2.1.9",
    "sqlglot==30.21.0",
    "sse-starlette==3.7.1",
    "starlette==1.10.0",
    "strawberry-graphql==0.335.0",
    "tenacity==9.1.4",
    "tiktoken==0.14.0",
    "tqdm==4.70.1",
    "truststore==0.10.5",
    "typing-inspection==0.4.5",
    "typing_extensions==4.16.0",
    "uncalled-for==0.6.2",
    "urllib3==2.8.0",
    "uvicorn==0.55.0",
    "watchfiles==1.3.0",
    "websockets==17.4",
    "wrapt==2.5.2",
];

/// How long Phoenix may take from its start to answering `/readyz`: about 10 s on an
/// idle machine (importing it is most of that), far more on a busy one.
const READY_WITHIN: Duration = Duration::from_secs(120);
/// How long one snippet of Python may run (see [`Phoenix::python`]).
const SNIPPET_LIMIT: Duration = Duration::from_secs(60);
/// How long one request to Phoenix's REST API may take.
const REQUEST_LIMIT: Duration = Duration::from_secs(30);
/// How much of Phoenix's log a failure shows.
const LOG_TAIL_LINES: usize = 60;

/// The virtualenv's `python`, with Phoenix installed; `None`, with the reason printed,
/// when it cannot be (a failure instead under `MUR_REQUIRE_SDKS`).
pub fn python_phoenix() -> Option<PathBuf> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PYTHON.get_or_init(install) {
        Ok(python) => Some(python.clone()),
        Err(reason) if required() => {
            panic!("Phoenix could not be installed and {REQUIRED} is set: {reason}")
        }
        Err(reason) => {
            println!("skipped: Phoenix is not installed: {reason}");
            None
        }
    }
}

fn install() -> Result<PathBuf, String> {
    let home = repo().join("target").join("phoenix");
    std::fs::create_dir_all(&home).map_err(|e| format!("{}: {e}", home.display()))?;
    // Test binaries run side by side: the first installs, the others wait here and
    // then find its marker.
    let _lock = Lock::take(&home.join("python.lock"))?;
    venv_install(&home.join("venv"), PACKAGES)
}

/// A Phoenix server of the test's own, on `127.0.0.1`: its HTTP port (UI, REST API and
/// OTLP/HTTP), its gRPC port (OTLP/gRPC, which nothing here uses but Phoenix always
/// opens), its working folder and database under `target/e2e/phoenix-*`, kept with its
/// log for inspection after a failure. Dropping it kills its whole process group.
///
/// Its process also dies with the thread that started it (`PR_SET_PDEATHSIG`), so a
/// test process killed from outside leaves no Phoenix behind: keep a `Phoenix` on the
/// thread that called [`Phoenix::start`].
pub struct Phoenix {
    child: Child,
    port: u16,
    log: PathBuf,
    python: PathBuf,
}

impl Phoenix {
    /// Phoenix, installed on first use, started and answering; `None`, with the reason
    /// printed, when it cannot be installed (and `MUR_REQUIRE_SDKS` is not set). One that
    /// is installed but does not come up within [`READY_WITHIN`] fails the test, with
    /// the end of its log.
    pub fn start() -> Option<Phoenix> {
        let python = python_phoenix()?;
        let dir = scratch("phoenix");
        // The ports are free when probed, not when Phoenix binds them some seconds
        // later: another test may have taken one in between, and then Phoenix exits and
        // is started again on others.
        for attempt in 1u32.. {
            let started = Instant::now();
            let mut phoenix = Phoenix::spawn(&python, &dir, attempt);
            let log = phoenix.log.clone();
            match phoenix.wait_ready(started) {
                Ok(()) => {
                    eprintln!(
                        "Phoenix is up at {} after {:.1?} (log: {})",
                        phoenix.endpoint(),
                        started.elapsed(),
                        log.display()
                    );
                    return Some(phoenix);
                }
                Err(Some(_)) if attempt < 3 && port_taken(&log) => {
                    eprintln!("Phoenix found a port taken; starting it again");
                }
                Err(exit) => {
                    let why = match exit {
                        Some(code) => format!("exited ({code}) before it was ready"),
                        None => format!("was not ready within {READY_WITHIN:?}"),
                    };
                    panic!(
                        "Phoenix on {} {why}; the end of {}:\n{}",
                        phoenix.endpoint(),
                        log.display(),
                        log_tail(&log)
                    )
                }
            }
        }
        unreachable!()
    }

    /// Phoenix started, its working folder `<dir>/work-<attempt>` and its log
    /// `<dir>/phoenix-<attempt>.log`.
    fn spawn(python: &Path, dir: &Path, attempt: u32) -> Phoenix {
        let work = dir.join(format!("work-{attempt}"));
        let log = dir.join(format!("phoenix-{attempt}.log"));
        std::fs::create_dir_all(&work).unwrap();
        let port = free_port("127.0.0.1:0");
        // Phoenix binds its gRPC port on every interface (`[::]`), whatever the host.
        let grpc_port = free_port("0.0.0.0:0");
        let out = File::create(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        let mut cmd = Command::new(python);
        cmd.args(["-m", "phoenix.server.main", "serve"]);
        clear_inherited(&mut cmd);
        cmd.env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
            .env("PHOENIX_WORKING_DIR", &work)
            // Nothing leaves the machine: no analytics pixels in the UI, no web fonts,
            // no download of the sandbox's WASM binary, no assistant, no web access.
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .env("PHOENIX_ALLOW_EXTERNAL_RESOURCES", "false")
            .env("PHOENIX_DISABLE_AGENT_ASSISTANT", "true")
            .env("PHOENIX_AGENTS_DISABLE_WEB_ACCESS", "true")
            .env("PHOENIX_ENABLE_MCP_SERVER", "false")
            // Thousands of lines of SQL a fresh database's migrations would log.
            .env("PHOENIX_LOG_MIGRATIONS", "false")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(&work)
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            // A group of its own, so the drop's kill reaches whatever it starts.
            .process_group(0);
        // SAFETY: prctl only sets an attribute of the child between fork and exec,
        // touching no memory of the parent.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", python.display()));
        Phoenix {
            child,
            port,
            log,
            python: python.to_path_buf(),
        }
    }

    /// Waits for `/readyz` (its database answering, after its migrations): an error
    /// with Phoenix's exit status when it exited, with none when the time ran out.
    fn wait_ready(&mut self, started: Instant) -> Result<(), Option<i32>> {
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Some(status.code().unwrap_or(-1)));
            }
            if let Ok((200, _)) = self.get("/readyz") {
                return Ok(());
            }
            if started.elapsed() > READY_WITHIN {
                return Err(None);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The base URL to set as `OTEL_EXPORTER_OTLP_ENDPOINT`, without a trailing slash:
    /// an exporter appends `/v1/traces`, where Phoenix takes OTLP/HTTP protobuf.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where OTLP/HTTP spans are posted: `<endpoint>/v1/traces` (the value of
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, which is taken as is).
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    /// Phoenix's web UI, its project list (`http://127.0.0.1:<port>/`).
    pub fn ui_url(&self) -> String {
        format!("{}/", self.endpoint())
    }

    /// The UI's page of `project` (its traces), which must exist by now:
    /// `/projects/<the project's id>`.
    pub fn project_ui_url(&self, project: &str) -> String {
        format!("{}/projects/{}", self.endpoint(), self.project_id(project))
    }

    /// The UI's page of one trace of `project` (`trace_id` in hex, as
    /// `context.trace_id`): its span tree and each span's attributes.
    pub fn trace_ui_url(&self, project: &str, trace_id: &str) -> String {
        format!("{}/traces/{trace_id}", self.project_ui_url(project))
    }

    /// Phoenix's id of `project` (a GraphQL global id, `UHJvamVjdDox`), as the UI's
    /// addresses use it; the test fails if there is no such project.
    pub fn project_id(&self, project: &str) -> String {
        let target = format!("/v1/projects/{}", encode(project));
        let body = self.get_json(&target).unwrap_or_else(|e| panic!("{e}"));
        body["data"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("GET {target}: no data.id in {body}"))
            .to_string()
    }

    /// Runs Python `code` (`python -c`, `args` after it) in Phoenix's virtualenv, with
    /// `env` set and no `OTEL_*` or `PHOENIX_*` variable of the test's own environment,
    /// within a minute: for a real OTLP client to send spans with.
    pub fn python(&self, code: &str, args: &[&str], env: &[(&str, &str)]) -> Snippet {
        let mut cmd = Command::new(&self.python);
        cmd.arg("-c").arg(code).args(args);
        clear_inherited(&mut cmd);
        cmd.envs(env.iter().copied())
            .env("PYTHONDONTWRITEBYTECODE", "1");
        let out =
            run_within(&mut cmd, SNIPPET_LIMIT).unwrap_or_else(|e| panic!("a Python snippet: {e}"));
        Snippet {
            status: out.status,
            stdout: out.stdout,
            stderr: out.stderr,
        }
    }

    /// Every span Phoenix has stored in `project`, oldest start first (ties in the order
    /// they were stored), through its REST API (`GET /v1/projects/{project}/spans`, each
    /// page's `next_cursor` followed); none when the project does not exist (yet).
    pub fn spans(&self, project: &str) -> Vec<Value> {
        let mut spans = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut target = format!(
                "/v1/projects/{}/spans?limit=1000&sort=start_time&order=asc",
                encode(project)
            );
            if let Some(cursor) = &cursor {
                target.push_str(&format!("&cursor={}", encode(cursor)));
            }
            let (status, body) = self
                .get(&target)
                .unwrap_or_else(|e| panic!("GET {target}: {e}\n{}", self.log()));
            if status == 404 && spans.is_empty() {
                return spans;
            }
            assert_eq!(status, 200, "GET {target}: {body}");
            let page: Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("GET {target}: not JSON ({e}): {body}"));
            let data = page["data"]
                .as_array()
                .unwrap_or_else(|| panic!("GET {target}: no data in {body}"));
            spans.extend(data.iter().cloned());
            match page["next_cursor"].as_str() {
                Some(next) if !data.is_empty() => cursor = Some(next.to_string()),
                _ => return spans,
            }
        }
    }

    /// [`Phoenix::spans`] of `project` again and again until `holds` of them, which it
    /// returns; the test fails after `within`, showing the spans it had. Exporters
    /// batch (a few seconds) and Phoenix stores a moment after it answers, so a span
    /// is seen some seconds after its end.
    pub fn eventually_spans(
        &self,
        project: &str,
        mut holds: impl FnMut(&[Value]) -> bool,
        within: Duration,
    ) -> Vec<Value> {
        let until = Instant::now() + within;
        loop {
            let spans = self.spans(project);
            if holds(&spans) {
                return spans;
            }
            if Instant::now() > until {
                panic!(
                    "the spans of project {project:?} did not hold within {within:?}; they are:\n{}\nthe end of Phoenix's log:\n{}",
                    SpanTree::new(spans).outline(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The end of Phoenix's log (its stdout and stderr, with uvicorn's access lines).
    pub fn log(&self) -> String {
        log_tail(&self.log)
    }

    /// `GET target` as parsed JSON, when the answer is a `200`.
    fn get_json(&self, target: &str) -> Result<Value, String> {
        let (status, body) = self.get(target).map_err(|e| format!("GET {target}: {e}"))?;
        if status != 200 {
            return Err(format!("GET {target}: {status} {body}"));
        }
        serde_json::from_str(&body).map_err(|e| format!("GET {target}: not JSON ({e}): {body}"))
    }

    /// One `GET target` (a path and query) on its own connection, closed after the
    /// answer: the status and the body; an error when Phoenix cannot be reached or
    /// answers nothing HTTP.
    pub fn get(&self, target: &str) -> Result<(u16, String), String> {
        let address = format!("127.0.0.1:{}", self.port);
        let socket_address: SocketAddr = address.parse().unwrap();
        let mut socket = TcpStream::connect_timeout(&socket_address, Duration::from_secs(5))
            .map_err(|e| format!("{address}: {e}"))?;
        socket.set_read_timeout(Some(REQUEST_LIMIT)).unwrap();
        socket.set_write_timeout(Some(REQUEST_LIMIT)).unwrap();
        let request = raw_request(
            &address,
            "GET",
            target,
            &[("accept", "application/json"), ("connection", "close")],
            "",
        );
        socket
            .write_all(request.as_bytes())
            .map_err(|e| format!("{address}: {e}"))?;
        let mut reply = Vec::new();
        socket
            .read_to_end(&mut reply)
            .map_err(|e| format!("{address}: {e}"))?;
        parse_reply(&reply)
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        // SAFETY: kill only sends a signal, to the group this child leads (not yet
        // reaped, so its id is still its own).
        unsafe { libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// The spans of a project as a tree, by `context.span_id` and `parent_id`: for checks
/// such as "`invoke_agent probe` has the children `chat m`, `execute_tool bash`". The
/// spans keep the order they came in ([`Phoenix::spans`]: by start), and so do each
/// span's children.
pub struct SpanTree {
    spans: Vec<Value>,
    by_id: HashMap<String, usize>,
}

impl SpanTree {
    pub fn new(spans: Vec<Value>) -> SpanTree {
        let by_id = spans
            .iter()
            .enumerate()
            .map(|(i, span)| (span_id(span).to_string(), i))
            .collect();
        SpanTree { spans, by_id }
    }

    pub fn spans(&self) -> &[Value] {
        &self.spans
    }

    /// The span whose `context.span_id` is `id`.
    pub fn by_id(&self, id: &str) -> Option<&Value> {
        self.by_id.get(id).map(|&i| &self.spans[i])
    }

    /// The spans without a parent, and those whose parent is not (yet) among the spans.
    pub fn roots(&self) -> Vec<&Value> {
        self.spans
            .iter()
            .filter(|span| self.parent(span).is_none())
            .collect()
    }

    /// The parent of `span`, when it is among the spans.
    pub fn parent(&self, span: &Value) -> Option<&Value> {
        parent_id(span).and_then(|id| self.by_id(id))
    }

    /// The spans whose parent is `span`.
    pub fn children(&self, span: &Value) -> Vec<&Value> {
        let id = span_id(span);
        self.spans
            .iter()
            .filter(|child| parent_id(child) == Some(id))
            .collect()
    }

    /// The names of `span`'s children, in order.
    pub fn child_names(&self, span: &Value) -> Vec<&str> {
        self.children(span).into_iter().map(name).collect()
    }

    /// The spans named `name`.
    pub fn named(&self, name_: &str) -> Vec<&Value> {
        self.spans.iter().filter(|s| name(s) == name_).collect()
    }

    /// The one span named `name`; the test fails, showing the tree, if there is not
    /// exactly one.
    pub fn one(&self, name_: &str) -> &Value {
        match self.named(name_).as_slice() {
            [span] => span,
            found => panic!(
                "{} spans named {name_:?}, not one, in:\n{}",
                found.len(),
                self.outline()
            ),
        }
    }

    /// The descendants of `span` (children, their children, ...), depth first.
    pub fn descendants(&self, span: &Value) -> Vec<&Value> {
        let mut out = Vec::new();
        for child in self.children(span) {
            out.push(child);
            out.extend(self.descendants(child));
        }
        out
    }

    /// The tree as indented lines (`name [span_kind] status span_id`), for a failure's
    /// message.
    pub fn outline(&self) -> String {
        fn walk(tree: &SpanTree, span: &Value, depth: usize, out: &mut String) {
            out.push_str(&format!(
                "{}{} [{}] {} {}\n",
                "  ".repeat(depth),
                name(span),
                span["span_kind"].as_str().unwrap_or("?"),
                span["status_code"].as_str().unwrap_or("?"),
                span_id(span)
            ));
            for child in tree.children(span) {
                walk(tree, child, depth + 1, out);
            }
        }
        let mut out = String::new();
        for root in self.roots() {
            walk(self, root, 0, &mut out);
        }
        if out.is_empty() {
            out.push_str("(no spans)\n");
        }
        out
    }
}

/// A span's `name`.
pub fn name(span: &Value) -> &str {
    span["name"].as_str().unwrap_or_default()
}

/// A span's `context.span_id` (16 lowercase hex digits).
pub fn span_id(span: &Value) -> &str {
    span["context"]["span_id"].as_str().unwrap_or_default()
}

/// A span's `context.trace_id` (32 lowercase hex digits).
pub fn trace_id(span: &Value) -> &str {
    span["context"]["trace_id"].as_str().unwrap_or_default()
}

/// A span's `parent_id`, `None` for a root.
pub fn parent_id(span: &Value) -> Option<&str> {
    span["parent_id"].as_str()
}

/// The attribute `key` of a span (a flat dotted key: `gen_ai.request.model`).
pub fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"].get(key)
}

/// Removes what the test's own environment says to OpenTelemetry or Phoenix (an
/// endpoint, a project, a collector), so only what the harness sets applies.
fn clear_inherited(cmd: &mut Command) {
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("OTEL_") || key.starts_with("PHOENIX_") {
            cmd.env_remove(key.as_ref());
        }
    }
}

/// A port nothing listens on at `bind` right now.
fn free_port(bind: &str) -> u16 {
    let probe = TcpListener::bind(bind).unwrap_or_else(|e| panic!("{bind}: {e}"));
    probe.local_addr().unwrap().port()
}

/// Whether a Phoenix that exited says it found its port taken.
fn port_taken(log: &Path) -> bool {
    let text = std::fs::read_to_string(log)
        .unwrap_or_default()
        .to_ascii_lowercase();
    text.contains("address already in use") || text.contains("failed to bind")
}

/// The last [`LOG_TAIL_LINES`] lines of a log.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("({e})"));
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// `text` percent-encoded for a path segment or a query value.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The status and body of an HTTP/1.1 reply read to its close (a chunked body
/// decoded).
fn parse_reply(reply: &[u8]) -> Result<(u16, String), String> {
    let shown = || String::from_utf8_lossy(reply).into_owned();
    let split = reply
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("no HTTP head in {:?}", shown()))?;
    let head = String::from_utf8_lossy(&reply[..split]).to_ascii_lowercase();
    let mut body = &reply[split + 4..];
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let chunked = head
        .lines()
        .any(|line| line.starts_with("transfer-encoding:") && line.contains("chunked"));
    if !chunked {
        return Ok((status, String::from_utf8_lossy(body).into_owned()));
    }
    let mut out = Vec::new();
    loop {
        let end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| format!("a chunk without its size in {:?}", shown()))?;
        let size = String::from_utf8_lossy(&body[..end]);
        let size = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16)
            .map_err(|e| format!("a chunk size {size:?}: {e}"))?;
        if size == 0 {
            return Ok((status, String::from_utf8_lossy(&out).into_owned()));
        }
        let chunk = body
            .get(end + 2..end + 2 + size)
            .ok_or_else(|| format!("a short chunk in {:?}", shown()))?;
        out.extend_from_slice(chunk);
        body = body.get(end + 4 + size..).unwrap_or_default();
    }
}
