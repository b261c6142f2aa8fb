//! `--amqp10-fe2o3`: the `--amqp10-queue` load driven by the real fe2o3-amqp client with its
//! default `Connection::open` (Nagle's algorithm left on, one write per transfer), as an
//! application in the field runs it. Both links are pre-settled with `--amqp10-settled`,
//! otherwise the sender waits for each transfer's outcome as fe2o3's `send` does.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::Data;
use fe2o3_amqp::types::primitives::Binary;
use fe2o3_amqp::{Connection, Receiver, Sender, Session};

use crate::args::Config;
use crate::report::Counters;
use crate::stats::Shared;

/// Opens a connection and a session the way an application does.
async fn open(
    config: &Config,
    container_id: &str,
) -> Result<
    (
        fe2o3_amqp::connection::ConnectionHandle<()>,
        fe2o3_amqp::session::SessionHandle<()>,
    ),
    String,
> {
    let uri = &config.uri;
    let url = format!(
        "amqp://{}:{}@{}:{}",
        uri.user, uri.password, uri.host, uri.port
    );
    let mut connection = Connection::open(container_id.to_owned(), url.as_str())
        .await
        .map_err(|e| format!("fe2o3 connection: {e}"))?;
    let session = Session::begin(&mut connection)
        .await
        .map_err(|e| format!("fe2o3 session: {e}"))?;
    Ok((connection, session))
}

fn settle_mode(config: &Config) -> SenderSettleMode {
    if config.amqp10_settled {
        SenderSettleMode::Settled
    } else {
        SenderSettleMode::Unsettled
    }
}

/// The receiver: counts deliveries and accepts each (fe2o3 tops the credit up as they are
/// accepted; a pre-settled delivery sends no disposition).
pub async fn receive(
    config: Arc<Config>,
    address: String,
    credit: u32,
    counters: Arc<Counters>,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let (_connection, mut session) = open(&config, "warren-perf-fe2o3-receiver").await?;
    let mut receiver = Receiver::builder()
        .name("warren-perf-receiver")
        .source(address)
        .sender_settle_mode(settle_mode(&config))
        .credit_mode(fe2o3_amqp::link::receiver::CreditMode::Auto(credit))
        .attach(&mut session)
        .await
        .map_err(|e| format!("fe2o3 receiver attach: {e}"))?;
    let mut stop = shared.stop_tx.subscribe();
    loop {
        tokio::select! {
            delivery = receiver.recv::<Data>() => {
                let delivery = delivery.map_err(|e| format!("fe2o3 receive: {e}"))?;
                receiver
                    .accept(&delivery)
                    .await
                    .map_err(|e| format!("fe2o3 accept: {e}"))?;
                counters.delivered.fetch_add(1, Ordering::Relaxed);
            }
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// The sender: one `send` after another, each awaited, as an application writes.
pub async fn send(
    config: Arc<Config>,
    address: String,
    counters: Arc<Counters>,
    shared: Arc<Shared>,
) -> Result<(), String> {
    let (_connection, mut session) = open(&config, "warren-perf-fe2o3-sender").await?;
    let mut sender = Sender::builder()
        .name("warren-perf-sender")
        .target(address)
        .sender_settle_mode(settle_mode(&config))
        .attach(&mut session)
        .await
        .map_err(|e| format!("fe2o3 sender attach: {e}"))?;
    let body = vec![b'x'; config.size];
    while !shared.is_stopping() {
        sender
            .send(Data(Binary::from(body.clone())))
            .await
            .map_err(|e| format!("fe2o3 send: {e}"))?;
        counters.sent.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}
