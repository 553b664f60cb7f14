//! Driver cost benchmark (`cargo bench --bench driver`): what the built-in `openai` driver
//! component adds to one inference call (the component call with the typed request, its
//! translation to and from the provider's JSON, and wasi:http through the host's
//! allow-list and retry hooks and its connection pool), against a plain hyper client
//! sending the same requests to the same loopback mock.
//!
//! Method, written down in BENCHMARKS.md: one `mur run` whose task makes TURNS inference
//! calls (each answer asks for a tool that does not exist, so the tool step costs next to
//! nothing) with the `openai` driver against the mock, and the same session with the
//! scripted driver giving the same answers without any HTTP. The difference, divided by
//! TURNS, is the driver's cost per call. The baseline sends the very request bodies the
//! driver sent (recorded by the mock) with hyper, one fresh connection per request (as
//! wasi-http's default sender opens, which the host used before it kept connections),
//! and also over one kept-alive connection (as the host's pool now sends them).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

const TURNS: usize = 200;
const RUNS: usize = 5;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"bench","choices":[{"index":0,"message":{"role":"assistant","content":"Looking.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"nothing","arguments":"{\"path\":\".\"}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":120,"completion_tokens":12,"total_tokens":132}}"#;

type Bodies = Arc<Mutex<Vec<Bytes>>>;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn scratch(name: &str) -> PathBuf {
    let dir = repo().join("target").join("bench").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The mock model server: every POST gets ANSWER; bodies are kept for the baseline and
/// the connections it accepts are counted.
async fn serve(listener: TcpListener, bodies: Bodies, connections: Arc<AtomicUsize>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        connections.fetch_add(1, Ordering::SeqCst);
        let bodies = bodies.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let bodies = bodies.clone();
                async move {
                    let body = req.into_body().collect().await.unwrap().to_bytes();
                    bodies.lock().unwrap().push(body);
                    let response = Response::builder()
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(ANSWER.as_bytes())))
                        .unwrap();
                    Ok::<_, Infallible>(response)
                }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

fn capsule(dir: &Path, port: u16, driver: &str) -> PathBuf {
    let inference = if driver == "openai" {
        format!(
            "  driver: openai\n  endpoint: http://127.0.0.1:{port}/v1\n  model: bench\n  \
             api_key: sk-bench-key-0000\n  stream: false\n"
        )
    } else {
        let turn =
            "  - text: Looking.\n    tool_calls: [{id: call_1, name: nothing, input: {path: .}}]\n";
        std::fs::write(
            dir.join("script.yaml"),
            format!("turns:\n{}", turn.repeat(TURNS)),
        )
        .unwrap();
        "  driver: scripted\n  script: ./script.yaml\n  model: bench\n".to_string()
    };
    let manifest = format!(
        "name: bench\nversion: \"0.1.0\"\ninference:\n{inference}  max_turns: {TURNS}\n\
         capabilities:\n  network:\n    allow: [\"http://127.0.0.1:{port}\"]\n\
         lifecycle:\n  task_acceptance: none\n"
    );
    let path = dir.join(format!("{driver}.yaml"));
    std::fs::write(&path, manifest).unwrap();
    path
}

/// One whole session of TURNS calls; the task ends at its turn limit (exit status 1).
fn session(manifest: &Path, cache: &Path, workdir: &Path) -> Duration {
    let started = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_mur"))
        .env("MUR_CACHE_DIR", cache)
        .args(["run", "--port", "0", "--task", "bench", "--manifest"])
        .arg(manifest)
        .arg("--workdir")
        .arg(workdir)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(workdir.with_extension("err")).unwrap())
        .status()
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(
        status.code(),
        Some(1),
        "the session should end at its turn limit"
    );
    elapsed
}

async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    body: Bytes,
) {
    let request = Request::post(format!("http://{addr}/v1/chat/completions"))
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-bench-key-0000")
        .body(Full::new(body))
        .unwrap();
    sender.ready().await.unwrap();
    let response = sender.send_request(request).await.unwrap();
    let answer = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(answer.len(), ANSWER.len());
}

async fn connect(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

/// The same requests with hyper: a fresh connection each, or one kept alive.
async fn baseline(addr: SocketAddr, bodies: &[Bytes], fresh: bool) -> Duration {
    let started = Instant::now();
    let mut kept = connect(addr).await;
    for body in bodies {
        if fresh {
            let mut sender = connect(addr).await;
            send(&mut sender, addr, body.clone()).await;
        } else {
            send(&mut kept, addr, body.clone()).await;
        }
    }
    started.elapsed()
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn per_call(total: Duration) -> f64 {
    total.as_secs_f64() * 1e6 / TURNS as f64
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bodies: Bodies = Arc::default();
    let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    runtime.spawn(serve(listener, bodies.clone(), connections.clone()));

    let dir = scratch("driver");
    let cache = dir.join("cache");
    let openai = capsule(&dir, addr.port(), "openai");
    let scripted = capsule(&dir, addr.port(), "scripted");
    // Warm-up: fills the component cache so no run pays for compilation.
    session(&openai, &cache, &dir.join("warm"));
    session(&scripted, &cache, &dir.join("warm"));

    let mut with_driver = Vec::new();
    let mut without = Vec::new();
    for run in 0..RUNS {
        bodies.lock().unwrap().clear();
        connections.store(0, Ordering::SeqCst);
        with_driver.push(session(&openai, &cache, &dir.join(format!("o{run}"))));
        // The host keeps one connection per model server for the whole session.
        assert_eq!(
            connections.load(Ordering::SeqCst),
            1,
            "the driver's {TURNS} requests share one connection"
        );
        without.push(session(&scripted, &cache, &dir.join(format!("s{run}"))));
    }
    let recorded: Vec<Bytes> = bodies.lock().unwrap().clone();
    assert_eq!(recorded.len(), TURNS, "the mock saw one request per turn");

    let mut fresh = Vec::new();
    let mut kept = Vec::new();
    for _ in 0..RUNS {
        fresh.push(runtime.block_on(baseline(addr, &recorded, true)));
        kept.push(runtime.block_on(baseline(addr, &recorded, false)));
    }

    let driver_cost = per_call(median(with_driver.clone())) - per_call(median(without.clone()));
    let fresh_cost = per_call(median(fresh));
    let kept_cost = per_call(median(kept));
    let mean_body = recorded.iter().map(Bytes::len).sum::<usize>() / recorded.len();
    println!("driver cost per inference call ({TURNS} calls a session, median of {RUNS}):");
    println!(
        "  session with openai driver: {:.1} ms; with scripted driver: {:.1} ms",
        median(with_driver).as_secs_f64() * 1000.0,
        median(without).as_secs_f64() * 1000.0
    );
    println!("  request body: {mean_body} bytes on average, all on one connection");
    println!("  openai driver (component + wasi-http): {driver_cost:.0} µs a call");
    println!("  hyper, fresh connection a request:    {fresh_cost:.0} µs a call");
    println!("  hyper, one kept-alive connection:     {kept_cost:.0} µs a call");
    println!(
        "  ratio driver / hyper fresh: {:.2}x; driver / hyper kept-alive: {:.2}x",
        driver_cost / fresh_cost,
        driver_cost / kept_cost
    );
}
