//! The command handlers: read the keys, run [`crate::decide::run`], reply,
//! write and replicate. No panic crosses into Redis: a panic becomes
//! `ERR drl: internal error` (and, since every write happens after the
//! decision logic, nothing is written).
#![allow(unsafe_code)]

use std::ffi::{CString, c_char, c_int, c_longlong};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{SystemTime, UNIX_EPOCH};

use std::cell::RefCell;

use crate::decide::{Call, Reply};
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
    let result = catch_unwind(|| {
        // SAFETY: valid ctx.
        unsafe { (ffi::api().reply_with_long_long)(ctx, crate::PROTOCOL_VERSION) }
    });
    // SAFETY: valid ctx.
    result.unwrap_or_else(|_| unsafe { error(ctx, "internal error") })
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
    thread_local! {
        static CALL: RefCell<Call> = RefCell::new(Call::default());
    }
    CALL.with(|call| {
        // The borrow ends when the closure returns or unwinds: never held
        // across calls. `begin`/`decide` reset every buffer they use.
        let mut call = call.borrow_mut();
        // SAFETY: same ctx, argv entries and keys as above.
        unsafe { run(ctx, &mut call, key_args, &keys, raw_spec) }
    })
}

unsafe fn run(
    ctx: *mut Ctx,
    call: &mut Call,
    key_args: &[*mut RString],
    keys: &[&[u8]],
    raw_spec: &[u8],
) -> c_int {
    let api = ffi::api();
    if let Err(why) = crate::spec::parse_into(&mut call.spec, raw_spec, keys.len()) {
        // SAFETY: valid ctx.
        return unsafe { error(ctx, &why) };
    }
    call.begin(keys);
    let mut open = OpenKeys(vec![std::ptr::null_mut(); keys.len()]);
    for (i, &key) in key_args.iter().enumerate() {
        if call.first[i] != i {
            continue;
        }
        // SAFETY: valid ctx and key string; the handle is closed by `open`.
        unsafe {
            let k = (api.open_key)(ctx, key, ffi::READ | ffi::WRITE);
            open.0[i] = k;
            match (api.key_type)(k) {
                ffi::KEYTYPE_EMPTY => {}
                ffi::KEYTYPE_STRING => {
                    let mut len = 0usize;
                    let p = (api.string_dma)(k, &mut len, ffi::READ);
                    if !p.is_null() && len > 0 {
                        call.values[i]
                            .extend_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), len));
                    }
                }
                _ => {
                    (api.reply_with_error)(ctx, ffi::WRONGTYPE.as_ptr());
                    return ffi::OK;
                }
            }
        }
    }
    if let Err(why) = call.decide(keys, server_now) {
        // SAFETY: valid ctx.
        return unsafe { error(ctx, &why) };
    }
    // SAFETY: valid ctx and handles; buffers outlive each call.
    unsafe {
        for (key, value, ttl_ms) in call.writes() {
            let k = open.0[key];
            // Resize the value in place (no delete + re-add of the key, as
            // StringSet would do), then copy the new state into it.
            let mut len = 0usize;
            let p = if (api.string_truncate)(k, value.len()) == ffi::OK {
                (api.string_dma)(k, &mut len, ffi::WRITE)
            } else {
                std::ptr::null_mut()
            };
            assert!(
                !p.is_null() && len == value.len(),
                "a string key opened for writing could not be resized"
            );
            std::ptr::copy_nonoverlapping(value.as_ptr(), p.cast::<u8>(), len);
            (api.set_expire)(k, ttl_ms as c_longlong);
            (api.signal_modified_key)(ctx, key_args[key]);
            (api.replicate)(
                ctx,
                c"SET".as_ptr(),
                c"sbcl".as_ptr(),
                key_args[key],
                value.as_ptr().cast::<c_char>(),
                value.len(),
                c"PX".as_ptr(),
                ttl_ms as c_longlong,
            );
        }
        drop(open);
        (api.reply_with_array)(ctx, call.reply_len() as _);
        for item in call.reply() {
            match item {
                Reply::Int(n) => (api.reply_with_long_long)(ctx, n),
                Reply::Bulk(b) => {
                    (api.reply_with_string_buffer)(ctx, b.as_ptr().cast::<c_char>(), b.len())
                }
            };
        }
    }
    ffi::OK
}
