//! The connection to the destination, for a tunnel or a forwarded request alike.

use std::time::Duration;

use tokio::net::TcpStream;

use super::Destination;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) async fn connect(destination: &Destination) -> Result<TcpStream, String> {
    let target = (destination.host.as_str(), destination.port);
    match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(target)).await {
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            Ok(stream)
        }
        Ok(Err(e)) => Err(format!("connect failed: {e}")),
        Err(_) => Err(format!(
            "connect failed: no answer within {}s",
            CONNECT_TIMEOUT.as_secs()
        )),
    }
}
