//! The acquisition round's rules, one case each.

use std::sync::Arc;

use redis::Value;

use super::*;
use crate::lock::Keys;
use crate::options::MutexOptions;
use crate::wire::Request;

/// An unfenced lock's caller that has not waited and will not wait (a `try_lock`) asks
/// with plain commands, a fenced lock's with the acquire script and three keys and
/// arguments; one that will wait, or has waited, sends the script with the waiters key
/// and the waiter's arguments.
#[test]
fn only_an_unfenced_try_lock_sends_plain_commands() {
    let keys = Arc::new(Keys::new(b"job"));
    let timeout = Duration::from_millis(250);
    let sent = |opts: MutexOptions, waited, announce| {
        let spec = Spec::new(Arc::clone(&keys), opts, timeout, 1).expect("valid options");
        let t0 = Stamp::from_micros(0);
        let (_, sent) = AcquireRound::new(
            &spec,
            b"t".to_vec(),
            t0,
            (waited, false),
            (announce, announce),
            b"w",
        );
        let words: Vec<Vec<Vec<u8>>> = sent
            .calls
            .iter()
            .map(|c| {
                let mut packed = Vec::new();
                c.write(&mut packed);
                match redis::parse_redis_value(&packed) {
                    Ok(Value::Array(w)) => w.iter().map(crate::lock::reply::bytes).collect(),
                    other => panic!("{other:?}"),
                }
            })
            .collect();
        words
    };
    let w = |s: &str| {
        s.split(' ')
            .map(|w| w.as_bytes().to_vec())
            .collect::<Vec<_>>()
    };
    let unfenced = MutexOptions {
        fencing: false,
        ..MutexOptions::default()
    };
    assert_eq!(
        sent(unfenced.clone(), false, Duration::ZERO),
        [
            w("SET job t NX PX 30000"),
            w("GET job"),
            w("EXISTS {job}:readers"),
        ]
    );
    let announce = Duration::from_millis(300);
    // A fenced try_lock: the script, without the waiters key and the waiter's arguments.
    let script = sent(MutexOptions::default(), false, Duration::ZERO);
    assert_eq!(script.len(), 1);
    assert_eq!(script[0][0], b"EVALSHA");
    assert_eq!(
        script[0][2..],
        w("3 job {job}:fence {job}:readers t 30000 1")[..]
    );
    let cases = [
        (MutexOptions::default(), false, announce),
        (unfenced.clone(), false, announce),
        (unfenced, true, Duration::ZERO),
    ];
    for (opts, waited, announce) in cases {
        let script = sent(opts, waited, announce);
        assert_eq!(script.len(), 1);
        assert_eq!(script[0][0], b"EVALSHA");
        assert_eq!(script[0].len(), 2 + 1 + 4 + 6);
        assert_eq!(script[0][6], b"{job}:waitq");
    }
}

use crate::lock::proto::testing::N;

/// A round of an unfenced lock on three nodes, begun at 0, that has (`waited`) or has not
/// waited, sending the script (it may wait).
fn round_of_three(waited: bool) -> AcquireRound {
    let opts = MutexOptions {
        fencing: false,
        ..MutexOptions::default()
    };
    let keys = Arc::new(Keys::new(b"job"));
    let spec = Spec::new(keys, opts, Duration::from_millis(250), 3).expect("valid");
    let announce = Duration::from_millis(300);
    let t0 = Stamp::from_micros(0);
    AcquireRound::new(
        &spec,
        b"t".to_vec(),
        t0,
        (waited, false),
        (announce, announce),
        b"w",
    )
    .0
}

fn granted() -> Answer {
    Ok(vec![Ok(Value::Int(0))])
}

fn taken() -> Answer {
    let holder = Value::BulkString(b"other".to_vec());
    Ok(vec![Ok(Value::Array(vec![
        Value::Int(0),
        Value::Int(5000),
        holder,
    ]))])
}

/// A round decided by a quorum's grant leaves the third node unread with no undo behind
/// it; when the verdict refuses it later (here: its validity ran out), the undo goes
/// there too, or a late grant there would stay. A round decided by a quorum's refusal
/// has the undo queued behind the unread node's request instead, and reports it as not
/// waited for.
#[test]
fn an_unread_node_is_undone_behind_its_request_or_by_the_verdict() {
    let mut round = round_of_three(true);
    round.answer(0, &N("n"), &granted());
    round.answer(1, &N("n"), &granted());
    assert!(round.decided() && !round.undo_behind_unread());
    round.left_unread(2, &N("n"));
    let late = Stamp::from_micros(3_600_000_000);
    let Err((refused, _)) = round.finish(late, false) else {
        panic!("granted after its validity");
    };
    assert_eq!(refused.undo_on, [0, 1, 2]);

    let mut round = round_of_three(true);
    round.answer(0, &N("n"), &taken());
    round.answer(1, &N("n"), &taken());
    assert!(round.decided() && round.undo_behind_unread());
    round.left_unread(2, &N("n"));
    let Err((refused, next)) = round.finish(Stamp::from_micros(1000), false) else {
        panic!("granted though taken");
    };
    assert!(refused.undo_on.is_empty(), "{:?}", refused.undo_on);
    let Next::Busy { .. } = next else {
        panic!("not busy");
    };
}

/// A grant takes the call's announcement back where it did not grant; where it granted
/// without taking it back itself (a round that had not waited), too, when an earlier
/// round of the call announced it.
#[test]
fn a_grant_withdraws_the_announcement_where_it_may_be_left() {
    for (waited, announced, withdraw_on) in [
        (false, false, vec![2]),
        (false, true, vec![0, 1, 2]),
        (true, true, vec![2]),
    ] {
        let mut round = round_of_three(waited);
        round.answer(0, &N("n"), &granted());
        round.answer(1, &N("n"), &granted());
        round.left_unread(2, &N("n"));
        let Ok(grant) = round.finish(Stamp::from_micros(1000), announced) else {
            panic!("refused");
        };
        assert_eq!(
            grant.withdraw_on, withdraw_on,
            "waited {waited}, announced {announced}"
        );
    }
}
