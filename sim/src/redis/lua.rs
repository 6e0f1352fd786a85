//! Scripts in embedded Lua 5.1, as Redis 7.0 runs them: `redis.call`/`redis.pcall` on the
//! simulated keyspace, and Redis's conversions between Lua values and replies.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use super::cmd;
use super::db::{Db, Reply};
use super::num::fmt_g17;

/// Commands a script may not call (Redis flags them `noscript`).
const NOT_IN_SCRIPTS: &[&str] = &["blpop", "eval", "evalsha", "script"];

/// The error that a failing `redis.call` raised: Redis reports it with the script's line.
struct Raised {
    msg: String,
    line: usize,
}

/// A Lua state with the `redis` library and the script cache (SHA1 → compiled function).
pub struct Engine {
    lua: Lua,
    scripts: HashMap<String, Function>,
    raised: Rc<RefCell<Option<Raised>>>,
    /// For a negative control: text replaced in every script before it is compiled (the
    /// script keeps its own SHA1, as if the server ran an older version of it).
    rewrite: Option<(String, String)>,
}

/// Redis's rule for an error text raised inside its Lua library: `-CODE message` keeps its
/// code (a bare `-message` gets `ERR`), anything else gets `ERR `.
fn error_text(msg: &str) -> String {
    let msg = msg.trim_end_matches(['\r', '\n']);
    match msg.strip_prefix('-') {
        Some(m) if m.contains(' ') => m.to_string(),
        Some(m) => format!("ERR {m}"),
        None => format!("ERR {msg}"),
    }
}

/// The SHA1 that names a script in EVALSHA.
pub fn sha1_hex(source: &[u8]) -> String {
    sha1_smol::Sha1::from(source).digest().to_string()
}

impl Engine {
    /// A fresh Lua state (Redis's libraries: base, table, string, math) with `redis.*` bound to
    /// `db`.
    pub fn new(db: Rc<RefCell<Db>>) -> Engine {
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH;
        let lua = Lua::new_with(libs, LuaOptions::default()).expect("Lua 5.1 starts");
        let raised = Rc::new(RefCell::new(None));
        let redis = lua.create_table().expect("a table");
        for (name, raise) in [("call", true), ("pcall", false)] {
            let (db, raised) = (db.clone(), raised.clone());
            let f = lua
                .create_function(move |lua, args: MultiValue| {
                    call(lua, args, &db, raise.then_some(&*raised))
                })
                .expect("a function");
            redis.raw_set(name, f).expect("set");
        }
        let sha = lua
            .create_function(|_, s: mlua::LuaString| Ok(sha1_hex(&s.as_bytes())))
            .expect("a function");
        redis.raw_set("sha1hex", sha).expect("set");
        lua.globals().raw_set("redis", redis).expect("set");
        lua.load(
            r"
redis.status_reply = function(s) return {ok = s} end
redis.error_reply = function(e)
  if e:sub(1, 1) == '-' then e = e:sub(2) end
  if not e:find(' ') then e = 'ERR ' .. e end
  return {err = e}
end
redis.log = function() end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
",
        )
        .exec()
        .expect("the redis library's Lua half loads");
        Engine {
            lua,
            scripts: HashMap::new(),
            raised,
            rewrite: None,
        }
    }

    /// Compiles and caches a script (`SCRIPT LOAD`, and every `EVAL`); answers its SHA1.
    pub fn load(&mut self, source: &[u8]) -> Result<String, Reply> {
        let sha = sha1_hex(source);
        if !self.scripts.contains_key(&sha) {
            let source = match &self.rewrite {
                Some((from, to)) => String::from_utf8_lossy(source)
                    .replace(from.as_str(), to)
                    .into_bytes(),
                None => source.to_vec(),
            };
            let f = self
                .lua
                .load(&source[..])
                .set_name("@user_script")
                .into_function()
                .map_err(|e| {
                    let msg = match e {
                        mlua::Error::SyntaxError { message, .. } => message,
                        other => other.to_string(),
                    };
                    Reply::err(format!("ERR Error compiling script (new function): {msg}"))
                })?;
            self.scripts.insert(sha.clone(), f);
        }
        Ok(sha)
    }

    /// Replaces `from` by `to` in every script loaded from now on (a negative control's old
    /// rule plugged into the scripts).
    pub fn rewrite(&mut self, from: &str, to: &str) {
        self.rewrite = Some((from.to_owned(), to.to_owned()));
    }

    /// Whether a script is cached.
    pub fn exists(&self, sha: &str) -> bool {
        self.scripts.contains_key(&sha.to_ascii_lowercase())
    }

    /// Forgets every script (`SCRIPT FLUSH`, a restart).
    pub fn flush(&mut self) {
        self.scripts.clear();
    }

    /// Runs a cached script; `None` if it is not cached (the caller answers NOSCRIPT).
    pub fn run(&mut self, sha: &str, keys: &[Vec<u8>], args: &[Vec<u8>]) -> Option<Reply> {
        let sha = sha.to_ascii_lowercase();
        let f = self.scripts.get(&sha)?.clone();
        let lua = &self.lua;
        let globals = lua.globals();
        for (name, values) in [("KEYS", keys), ("ARGV", args)] {
            let t = lua
                .create_table_with_capacity(values.len(), 0)
                .expect("a table");
            for (i, v) in values.iter().enumerate() {
                t.raw_set(i + 1, lua.create_string(v).expect("a string"))
                    .expect("set");
            }
            globals.raw_set(name, t).expect("set");
        }
        *self.raised.borrow_mut() = None;
        let reply = match f.call::<Value>(()) {
            Ok(v) => to_reply(&v),
            Err(e) => {
                let (msg, line) = match self.raised.borrow_mut().take() {
                    Some(r) => (r.msg, r.line),
                    None => lua_error(&e),
                };
                Reply::err(format!("{msg} script: {sha}, on @user_script:{line}."))
            }
        };
        Some(reply)
    }
}

/// The text and line Redis reports for a Lua runtime error (`error('x')`, a bad index, …).
fn lua_error(e: &mlua::Error) -> (String, usize) {
    let msg = match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => cause.to_string(),
        other => other.to_string(),
    };
    // mlua appends a traceback that Redis does not.
    let msg = msg
        .split("\nstack traceback:")
        .next()
        .unwrap_or_default()
        .to_string();
    let line = msg
        .strip_prefix("user_script:")
        .and_then(|rest| rest.split(':').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (format!("ERR {msg}"), line)
}

/// `redis.call` (with `raised`) and `redis.pcall`: runs one command on the keyspace.
fn call(
    lua: &Lua,
    args: MultiValue,
    db: &RefCell<Db>,
    raised: Option<&RefCell<Option<Raised>>>,
) -> mlua::Result<Value> {
    let reply = command_reply(args, db);
    if let (Reply::Error(msg), Some(raised)) = (&reply, raised) {
        let line = lua
            .inspect_stack(1, |d| d.current_line())
            .flatten()
            .unwrap_or(0);
        *raised.borrow_mut() = Some(Raised {
            msg: msg.clone(),
            line,
        });
        return Err(mlua::Error::RuntimeError(msg.clone()));
    }
    to_lua(lua, &reply)
}

/// The reply to one command that a script sends, with Redis's script-specific errors.
fn command_reply(args: MultiValue, db: &RefCell<Db>) -> Reply {
    let mut argv = Vec::with_capacity(args.len());
    for v in args {
        argv.push(match v {
            Value::String(s) => s.as_bytes().to_vec(),
            Value::Integer(i) => i.to_string().into_bytes(),
            Value::Number(n) => fmt_g17(n).into_bytes(),
            _ => {
                return Reply::err(error_text(
                    "Lua redis lib command arguments must be strings or integers",
                ));
            }
        });
    }
    let Some(name) = argv.first() else {
        return Reply::err(error_text(
            "Please specify at least one argument for this redis lib call",
        ));
    };
    if NOT_IN_SCRIPTS
        .iter()
        .any(|n| n.as_bytes().eq_ignore_ascii_case(name))
    {
        return Reply::err("ERR This Redis command is not allowed from script");
    }
    let Some(command) = cmd::lookup(name) else {
        return Reply::err("ERR Unknown Redis command called from script");
    };
    if !cmd::arity_ok(command, argv.len()) {
        return Reply::err("ERR Wrong number of args calling Redis command from script");
    }
    (command.run)(&mut db.borrow_mut(), &argv[1..])
}

/// A reply as a script sees it: integers are numbers, nil is `false`, a status is `{ok=…}`,
/// an error `{err=…}`.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Status(s) => Value::Table(one_field(lua, "ok", s)?),
        Reply::Error(s) => Value::Table(one_field(lua, "err", s)?),
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

fn one_field(lua: &Lua, name: &str, text: &str) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(name, text)?;
    Ok(t)
}

/// A Lua number as Redis converts it to an integer reply: a C cast to `long long`, which
/// truncates toward zero. Out of range (±inf, NaN, 2^63 and beyond) the cast is undefined in
/// C and does what the machine's instruction does: x86-64's `cvttsd2si` answers `i64::MIN`;
/// elsewhere (ARM's `fcvtzs`) it saturates, NaN to 0, as Rust's `as` does.
fn c_cast(n: f64) -> i64 {
    let in_range = (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n);
    if cfg!(target_arch = "x86_64") && !in_range {
        i64::MIN
    } else {
        n as i64
    }
}

/// A script's return value as the client receives it: numbers truncate to integers, `true`
/// is 1, `false` and nil are nil, a table is an array that stops at its first nil, unless it
/// has an `err` (error reply) or `ok` (status reply) string field.
fn to_reply(v: &Value) -> Reply {
    match v {
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        Value::Number(n) => Reply::Int(c_cast(*n)),
        Value::Table(t) => {
            for (field, make) in [
                ("err", Reply::Error as fn(String) -> Reply),
                ("ok", Reply::Status),
            ] {
                if let Ok(Value::String(s)) = t.raw_get::<Value>(field) {
                    return make(s.to_string_lossy().replace(['\r', '\n'], " "));
                }
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => items.push(to_reply(&item)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}
