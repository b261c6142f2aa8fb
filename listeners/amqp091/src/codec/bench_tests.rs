//! Rough timings of the hot paths, run on demand:
//! `cargo test -p warren-amqp091 --release -- --ignored --nocapture codec::bench`.
//! Ignored by default: timings on a shared CI machine are noise, not a pass/fail signal.

use std::hint::black_box;
use std::time::Instant;

use bytes::BytesMut;
use warren_core::message::Properties;

use super::*;

fn time(name: &str, iterations: u32, mut f: impl FnMut()) {
    for _ in 0..iterations / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..iterations {
        f();
    }
    let per = start.elapsed().as_nanos() as f64 / f64::from(iterations);
    println!("{name}: {per:.1} ns/op");
}

#[test]
#[ignore]
fn bench_hot_paths() {
    let mut raw = BytesMut::new();
    let properties = Properties {
        delivery_mode: Some(2),
        content_type: Some("text/plain".into()),
        ..Properties::default()
    };
    encode_properties(&properties, &mut raw).unwrap();
    let body = vec![0u8; 100];
    let publish = Method::BasicPublish {
        exchange: "amq.direct".into(),
        routing_key: "orders".into(),
        mandatory: false,
        immediate: false,
    };

    // A publish as it arrives: method, header, body.
    let mut wire = BytesMut::new();
    write_method_frame(&mut wire, 1, &publish).unwrap();
    write_content(&mut wire, 1, 60, &raw, &body, 131_072);
    let wire = wire.freeze();

    time(
        "decode publish (3 frames + method + raw header)",
        1_000_000,
        || {
            let mut buf = BytesMut::from(&wire[..]);
            let method = decode_frame(&mut buf, 131_072).unwrap().unwrap();
            let header = decode_frame(&mut buf, 131_072).unwrap().unwrap();
            let body = decode_frame(&mut buf, 131_072).unwrap().unwrap();
            black_box(Method::decode(&method.payload).unwrap());
            black_box(RawContentHeader::decode(&header.payload).unwrap());
            black_box(body);
        },
    );

    // Calibration: the two allocations a decoded publish cannot avoid.
    time("baseline: two short String allocations", 2_000_000, || {
        black_box((
            String::from(black_box("amq.direct")),
            String::from(black_box("orders")),
        ));
    });

    let mut buf = BytesMut::from(&wire[..]);
    let method_frame = decode_frame(&mut buf, 0).unwrap().unwrap();
    time("Method::decode(basic.publish)", 2_000_000, || {
        black_box(Method::decode(black_box(&method_frame.payload)).unwrap());
    });

    let mut out = BytesMut::with_capacity(1 << 20);
    time("BasicPublishRef::peek", 2_000_000, || {
        black_box(BasicPublishRef::peek(black_box(&method_frame.payload)).unwrap());
    });

    time("write_deliver (100-byte body)", 2_000_000, || {
        if out.len() > (1 << 19) {
            out.clear();
        }
        write_deliver(
            &mut out,
            1,
            "amq.ctag-1",
            42,
            false,
            "amq.direct",
            "orders",
            &raw,
            &body,
            131_072,
        );
    });

    time("write_method_frame(basic.publish)", 2_000_000, || {
        if out.len() > (1 << 19) {
            out.clear();
        }
        write_method_frame(&mut out, 1, black_box(&publish)).unwrap();
    });

    time(
        "decode_properties (content-type, delivery-mode)",
        2_000_000,
        || {
            black_box(decode_properties(black_box(&raw)).unwrap());
        },
    );
}
