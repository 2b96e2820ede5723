//! Hand-written bindings to the Redis module API (the subset drl uses), as
//! declared by `redismodule.h` of Redis 7.0, and the module's entry point.
//!
//! Like the header's `RedisModule_Init`, `RedisModule_OnLoad` takes the
//! `RedisModule_GetApi` function from the first pointer of the context and
//! looks every other function up by name.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_long, c_longlong, c_void};
use std::sync::OnceLock;

/// `RedisModuleCtx` (opaque).
pub type Ctx = c_void;
/// `RedisModuleString` (opaque).
pub type RString = c_void;
/// `RedisModuleKey` (opaque).
pub type Key = c_void;

/// `REDISMODULE_OK`.
pub const OK: c_int = 0;
/// `REDISMODULE_ERR`.
pub const ERR: c_int = 1;
const APIVER_1: c_int = 1;
/// `REDISMODULE_READ`.
pub const READ: c_int = 1;
/// `REDISMODULE_WRITE`.
pub const WRITE: c_int = 2;
/// `REDISMODULE_KEYTYPE_EMPTY`.
pub const KEYTYPE_EMPTY: c_int = 0;
/// `REDISMODULE_KEYTYPE_STRING`.
pub const KEYTYPE_STRING: c_int = 1;
/// `REDISMODULE_OPTION_NO_IMPLICIT_SIGNAL_MODIFIED`: closing a key opened
/// for writing does not count as modifying it (WATCH, client tracking); the
/// module signals the keys it actually wrote.
const OPTION_NO_IMPLICIT_SIGNAL_MODIFIED: c_int = 1 << 1;
/// `REDISMODULE_ERRORMSG_WRONGTYPE`.
pub const WRONGTYPE: &CStr = c"WRONGTYPE Operation against a key holding the wrong kind of value";

/// `RedisModuleCmdFunc`.
pub type CmdFunc = unsafe extern "C" fn(*mut Ctx, *mut *mut RString, c_int) -> c_int;

/// The API functions drl calls, looked up once at load time.
pub struct Api {
    pub create_command: unsafe extern "C" fn(
        *mut Ctx,
        *const c_char,
        Option<CmdFunc>,
        *const c_char,
        c_int,
        c_int,
        c_int,
    ) -> c_int,
    pub set_module_attribs: unsafe extern "C" fn(*mut Ctx, *const c_char, c_int, c_int),
    pub wrong_arity: unsafe extern "C" fn(*mut Ctx) -> c_int,
    pub reply_with_long_long: unsafe extern "C" fn(*mut Ctx, c_longlong) -> c_int,
    pub reply_with_error: unsafe extern "C" fn(*mut Ctx, *const c_char) -> c_int,
    pub reply_with_array: unsafe extern "C" fn(*mut Ctx, c_long) -> c_int,
    pub reply_with_string_buffer: unsafe extern "C" fn(*mut Ctx, *const c_char, usize) -> c_int,
    pub string_ptr_len: unsafe extern "C" fn(*const RString, *mut usize) -> *const c_char,
    pub open_key: unsafe extern "C" fn(*mut Ctx, *mut RString, c_int) -> *mut Key,
    pub close_key: unsafe extern "C" fn(*mut Key),
    pub key_type: unsafe extern "C" fn(*mut Key) -> c_int,
    pub string_dma: unsafe extern "C" fn(*mut Key, *mut usize, c_int) -> *mut c_char,
    pub string_truncate: unsafe extern "C" fn(*mut Key, usize) -> c_int,
    pub set_expire: unsafe extern "C" fn(*mut Key, c_longlong) -> c_int,
    pub set_module_options: unsafe extern "C" fn(*mut Ctx, c_int),
    pub signal_modified_key: unsafe extern "C" fn(*mut Ctx, *mut RString) -> c_int,
    pub replicate: unsafe extern "C" fn(*mut Ctx, *const c_char, *const c_char, ...) -> c_int,
}

static API: OnceLock<Api> = OnceLock::new();

/// The API; only valid after a successful `RedisModule_OnLoad`.
pub fn api() -> &'static Api {
    API.get()
        .expect("the module API is loaded in RedisModule_OnLoad")
}

type GetApi = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;

/// Looks `name` up and casts it to the function pointer type `F`.
///
/// # Safety
/// `F` must be the function pointer type of `name` in `redismodule.h`.
unsafe fn lookup<F: Copy>(get: GetApi, name: &CStr) -> Option<F> {
    assert_eq!(size_of::<F>(), size_of::<*mut c_void>());
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: GetApi writes a function pointer into `p` on success.
    if unsafe { get(name.as_ptr(), &mut p) } != OK || p.is_null() {
        return None;
    }
    // SAFETY: the caller guarantees `F` is the function's pointer type.
    Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

/// Loads every function of [`Api`].
///
/// # Safety
/// `ctx` is the context Redis passed to `RedisModule_OnLoad`.
unsafe fn load(ctx: *mut Ctx) -> Option<Api> {
    // SAFETY: as in redismodule.h's RedisModule_Init, the first pointer of
    // the context is RedisModule_GetApi.
    let get: GetApi = unsafe {
        let p = *(ctx as *const *const c_void);
        if p.is_null() {
            return None;
        }
        std::mem::transmute::<*const c_void, GetApi>(p)
    };
    macro_rules! f {
        ($name:literal) => {
            // SAFETY: each field's type is the header's declaration of $name.
            unsafe { lookup(get, $name)? }
        };
    }
    Some(Api {
        create_command: f!(c"RedisModule_CreateCommand"),
        set_module_attribs: f!(c"RedisModule_SetModuleAttribs"),
        wrong_arity: f!(c"RedisModule_WrongArity"),
        reply_with_long_long: f!(c"RedisModule_ReplyWithLongLong"),
        reply_with_error: f!(c"RedisModule_ReplyWithError"),
        reply_with_array: f!(c"RedisModule_ReplyWithArray"),
        reply_with_string_buffer: f!(c"RedisModule_ReplyWithStringBuffer"),
        string_ptr_len: f!(c"RedisModule_StringPtrLen"),
        open_key: f!(c"RedisModule_OpenKey"),
        close_key: f!(c"RedisModule_CloseKey"),
        key_type: f!(c"RedisModule_KeyType"),
        string_dma: f!(c"RedisModule_StringDMA"),
        string_truncate: f!(c"RedisModule_StringTruncate"),
        set_expire: f!(c"RedisModule_SetExpire"),
        set_module_options: f!(c"RedisModule_SetModuleOptions"),
        signal_modified_key: f!(c"RedisModule_SignalModifiedKey"),
        replicate: f!(c"RedisModule_Replicate"),
    })
}

/// The module's entry point, called by Redis on `--loadmodule` /
/// `MODULE LOAD`: registers `DRL.DECIDE` and `DRL.VERSION`.
///
/// # Safety
/// Called by Redis with a valid load context.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn RedisModule_OnLoad(
    ctx: *mut Ctx,
    _argv: *mut *mut RString,
    _argc: c_int,
) -> c_int {
    let loaded = std::panic::catch_unwind(|| {
        // SAFETY: ctx is Redis's load context.
        let api = unsafe { load(ctx) }?;
        let api = API.get_or_init(|| api);
        // SAFETY: valid ctx, NUL-terminated strings, our handlers have the
        // RedisModuleCmdFunc signature.
        unsafe {
            (api.set_module_attribs)(ctx, c"drl".as_ptr(), 1, APIVER_1);
            (api.set_module_options)(ctx, OPTION_NO_IMPLICIT_SIGNAL_MODIFIED);
            let ok = (api.create_command)(
                ctx,
                c"drl.decide".as_ptr(),
                Some(crate::command::decide),
                c"write deny-oom".as_ptr(),
                1,
                -2,
                1,
            ) == OK
                && (api.create_command)(
                    ctx,
                    c"drl.version".as_ptr(),
                    Some(crate::command::version),
                    c"readonly fast".as_ptr(),
                    0,
                    0,
                    0,
                ) == OK;
            ok.then_some(())
        }
    });
    match loaded {
        Ok(Some(())) => OK,
        _ => ERR,
    }
}
