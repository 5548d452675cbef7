//! `cra mcp serve`'s transport: one CARP session served over this process's standard input
//! and output, ended when the client leaves or the process is told to stop. The session lives
//! in this process ([`serve_stdio`]) or on a server, whose `/mcp` this process relays to
//! ([`bridge_stdio`]).

use std::future::Future;
use std::sync::Arc;

use rmcp::ServiceExt;
use rmcp::service::ServerInitializeError;

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
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let session = Arc::new(session);
    let watched = session.clone();
    let served = run_stdio(Handler::Stdio(session.clone()), stop, move |peer| {
        watched.notify_list_changes(peer);
    })
    .await;
    let ended = session
        .end()
        .await
        .map_err(|e| format!("the CARP session could not be ended: {}", e.body.message));
    served.and(ended)
}

/// Relays this process's standard input and output to the `/mcp` of the server at `url`, as
/// the agent `token` names: the server opens the CARP session at the handshake, decides and
/// records every call, and ends the session when this process leaves (its MCP session is
/// deleted) on end of input or `stop`. Tools are shown under `renames` (a proxy's upstream
/// names), or as the server names them when it is empty.
///
/// # Errors
/// When the server cannot be reached or refuses the handshake (the message says why), or the
/// standard transport fails other than by the client leaving.
pub async fn bridge_stdio(
    url: &str,
    token: &str,
    renames: super::bridge::Renames,
    stop: impl Future<Output = ()>,
) -> Result<(), String> {
    let bridge = super::bridge::Bridge::connect(url, token, renames).await?;
    let notify = bridge.clone();
    let served = run_stdio(bridge.clone(), stop, move |peer| {
        notify.forward_changes(peer)
    })
    .await;
    bridge.close().await;
    served
}

/// Serves `handler` on standard input and output until the client leaves or `stop` resolves;
/// `started` gets the client's peer once the handshake is done.
async fn run_stdio<H: rmcp::ServerHandler>(
    handler: H,
    stop: impl Future<Output = ()>,
    started: impl FnOnce(rmcp::Peer<rmcp::RoleServer>),
) -> Result<(), String> {
    tokio::pin!(stop);
    tokio::select! {
        serving = handler.serve(super::pipes::standard_streams()) => match serving {
            Ok(running) => {
                started(running.peer().clone());
                let cancel = running.cancellation_token();
                tokio::select! {
                    _ = running.waiting() => {}
                    () = &mut stop => cancel.cancel(),
                }
                Ok(())
            }
            // The client went away before (or during) the handshake: nothing to serve.
            Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
            Err(e) => Err(format!("the MCP connection did not start: {e}")),
        },
        () = &mut stop => Ok(()),
    }
}
