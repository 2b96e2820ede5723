//! The command handlers: read the keys, run [`crate::decide::run`], reply,
//! write and replicate. No panic crosses into Redis: a panic becomes
//! `ERR drl: internal error` (and, since every write happens after the
//! decision logic, nothing is written).
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int, c_longlong};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::decide::{self, Reply};
use crate::ffi::{self, Ctx, Key, RString};

/// Replies `ERR drl: <why>`.
unsafe fn error(ctx: *mut Ctx, why: &str) -> c_int {
    let msg = CString::new(format!("ERR drl: {why}").replace('\0', "\\0")).expect("NULs replaced");
    // SAFETY: valid ctx and C string.
    unsafe { (ffi::api().reply_with_error)(ctx, msg.as_ptr()) };
    ffi::OK
}

/// The bytes of a `RedisModuleString`, valid while Redis holds it.
unsafe fn bytes<'a>(s: *const RString) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: s is a live RedisModuleString (an argv entry).
    unsafe {
        let p = (ffi::api().string_ptr_len)(s, &mut len);
        if p.is_null() || len == 0 {
            return &[];
        }
        std::slice::from_raw_parts(p.cast(), len)
    }
}

/// The Redis clock as `TIME` gives it (microseconds) in ns.
fn server_now() -> u64 {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    (d.as_micros() as u64).saturating_mul(1000)
}

/// Open keys, closed on drop (also on early returns).
struct OpenKeys(Vec<*mut Key>);

impl Drop for OpenKeys {
    fn drop(&mut self) {
        for &k in &self.0 {
            if !k.is_null() {
                // SAFETY: opened by OpenKey and not yet closed.
                unsafe { (ffi::api().close_key)(k) };
            }
        }
    }
}

/// `DRL.VERSION`.
pub unsafe extern "C" fn version(ctx: *mut Ctx, _argv: *mut *mut RString, _argc: c_int) -> c_int {
    // SAFETY: valid ctx.
    unsafe { (ffi::api().reply_with_long_long)(ctx, crate::PROTOCOL_VERSION) }
}

/// `DRL.DECIDE key_1 ... key_K spec`.
pub unsafe extern "C" fn decide(ctx: *mut Ctx, argv: *mut *mut RString, argc: c_int) -> c_int {
    let result = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: Redis passes a valid ctx and argc live arguments.
        unsafe { decide_inner(ctx, argv, argc) }
    }));
    match result {
        Ok(rc) => rc,
        // SAFETY: valid ctx.
        Err(_) => unsafe { error(ctx, "internal error") },
    }
}

unsafe fn decide_inner(ctx: *mut Ctx, argv: *mut *mut RString, argc: c_int) -> c_int {
    let api = ffi::api();
    if argc < 3 {
        // SAFETY: valid ctx.
        return unsafe { (api.wrong_arity)(ctx) };
    }
    // SAFETY: argv has argc entries.
    let args = unsafe { std::slice::from_raw_parts(argv, argc as usize) };
    let key_args = &args[1..args.len() - 1];
    // SAFETY: argv entries live for the whole call.
    let keys: Vec<&[u8]> = key_args.iter().map(|&k| unsafe { bytes(k) }).collect();
    // SAFETY: as above.
    let raw_spec = unsafe { bytes(args[args.len() - 1]) };
    let spec = match crate::spec::parse(raw_spec, keys.len()) {
        Ok(s) => s,
        // SAFETY: valid ctx.
        Err(why) => return unsafe { error(ctx, &why) },
    };
    let first = decide::first_occurrences(&keys);
    let mut open = OpenKeys(vec![std::ptr::null_mut(); keys.len()]);
    let mut values = vec![Vec::new(); keys.len()];
    for i in 0..keys.len() {
        if first[i] != i {
            continue;
        }
        // SAFETY: valid ctx and key string; the handle is closed by `open`.
        unsafe {
            let k = (api.open_key)(ctx, key_args[i], ffi::READ | ffi::WRITE);
            open.0[i] = k;
            match (api.key_type)(k) {
                ffi::KEYTYPE_EMPTY => {}
                ffi::KEYTYPE_STRING => {
                    let mut len = 0usize;
                    let p = (api.string_dma)(k, &mut len, ffi::READ);
                    if !p.is_null() && len > 0 {
                        values[i] = std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec();
                    }
                }
                _ => {
                    (api.reply_with_error)(ctx, ffi::WRONGTYPE.as_ptr());
                    return ffi::OK;
                }
            }
        }
    }
    let outcome = match decide::run(&spec, &keys, &first, values, server_now) {
        Ok(o) => o,
        // SAFETY: valid ctx.
        Err(why) => return unsafe { error(ctx, &why) },
    };
    // SAFETY: valid ctx and handles; buffers outlive each call.
    unsafe {
        for w in &outcome.writes {
            let k = open.0[w.key];
            let s = (api.create_string)(ctx, w.value.as_ptr().cast::<c_char>(), w.value.len());
            (api.string_set)(k, s);
            (api.set_expire)(k, w.ttl_ms as c_longlong);
            (api.replicate)(
                ctx,
                c"SET".as_ptr(),
                c"sscl".as_ptr(),
                key_args[w.key],
                s,
                c"PX".as_ptr(),
                w.ttl_ms as c_longlong,
            );
            (api.free_string)(ctx, s);
        }
        drop(open);
        (api.reply_with_array)(ctx, outcome.reply.len() as _);
        for item in &outcome.reply {
            match item {
                Reply::Int(n) => (api.reply_with_long_long)(ctx, *n),
                Reply::Bulk(b) => {
                    (api.reply_with_string_buffer)(ctx, b.as_ptr().cast::<c_char>(), b.len())
                }
            };
        }
    }
    ffi::OK
}
