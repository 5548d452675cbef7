//! `cra mcp serve`'s transport: one CARP session served over this process's standard input
//! and output, ended when the client leaves or the process is told to stop.

use std::sync::Arc;

use rmcp::ServiceExt;

use super::McpSession;
use super::handler::Handler;

/// Serves `session` over this process's standard input and output until the client closes
/// its side or `stop` resolves, then ends the CARP session. A client that leaves (or a `stop`
/// that comes) before the MCP handshake ends the session too.
///
/// # Errors
/// When the transport fails other than by the client leaving, or the session cannot be ended
/// (its `session.ended` is then not recorded: the message says why). The session is ended
/// first in either case.
pub async fn serve_stdio(
    session: McpSession,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let session = Arc::new(session);
    tokio::pin!(stop);
    let served = tokio::select! {
        started = Handler::Stdio(session.clone()).serve(rmcp::transport::stdio()) => match started {
            Ok(running) => {
                session.notify_list_changes(running.peer().clone());
                let cancel = running.cancellation_token();
                tokio::select! {
                    _ = running.waiting() => {}
                    () = &mut stop => cancel.cancel(),
                }
                Ok(())
            }
            // The client went away before (or during) the handshake: nothing to serve.
            Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(e) => Err(format!("the MCP connection did not start: {e}")),
        },
        () = &mut stop => Ok(()),
    };
    let ended = session
        .end()
        .await
        .map_err(|e| format!("the CARP session could not be ended: {}", e.body.message));
    served.and(ended)
}
