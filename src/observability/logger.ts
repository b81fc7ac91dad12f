// The service's logger: pino JSON lines, secrets redacted by pino itself, errors with stack and cause, the
// active trace id on every line, and an optional access log for /m/* and /pay/* (off by default).
import pino from 'pino'
import type { AccessLogMode, LogLevel } from '../config/schema.ts'
import { traceLogFields } from './tracing.ts'

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void
  info(msg: string, fields?: Record<string, unknown>): void
  warn(msg: string, fields?: Record<string, unknown>): void
  error(msg: string, fields?: Record<string, unknown>): void
  child(fields: Record<string, unknown>): Logger
  readonly level: LogLevel
  /** The access log of the data plane; `on` is false by default, so the hot path pays one boolean. */
  readonly access: AccessLog
  /** Writes what an asynchronous destination still buffers (before exit). */
  flush(): void
}

export interface AccessLog {
  readonly on: boolean
  /** Whether this request gets an access line (always true in `all` mode, the sample rate in `sampled`). */
  sample(): boolean
}

export interface LogSettings {
  level: LogLevel
  access?: AccessLogMode
  /** In `sampled` mode, the share of requests logged (0…1). */
  access_sample_rate?: number
}

export interface LoggerOptions {
  /** Where lines go (tests pass a stream to read them); default stdout. */
  destination?: pino.DestinationStream
  /** Synchronous writes (tests, crash tests that SIGKILL); default: synchronous only when NODE_ENV=test. */
  sync?: boolean
}

/**
 * What pino replaces with "[Redacted]" wherever it appears in a line's fields: keys, secrets and payment
 * proofs, at the top level, one level down and in header maps. Never rely on this alone: do not log them.
 */
export const REDACT_PATHS = [
  'authorization',
  'api_key',
  'apiKey',
  'secret',
  'secrets',
  'previous_secret',
  'private_key',
  'privateKey',
  'treasury_private_key',
  'settler_private_key',
  'webhook_secret',
  'password',
  'x-payment',
  'payment-signature',
  '*.authorization',
  '*.api_key',
  '*.apiKey',
  '*.secret',
  '*.secrets',
  '*.previous_secret',
  '*.private_key',
  '*.privateKey',
  '*.treasury_private_key',
  '*.settler_private_key',
  '*.webhook_secret',
  '*.password',
  '*["x-payment"]',
  '*["payment-signature"]',
  'headers.*.authorization',
  'headers["x-api-key"]',
  'upstream_headers.*',
  '*.upstream_headers.*',
]

const OFF: AccessLog = { on: false, sample: () => false }
const ALL: AccessLog = { on: true, sample: () => true }

function accessLog(settings: LogSettings): AccessLog {
  if (settings.access === 'all') return ALL
  if (settings.access === 'sampled') {
    const rate = settings.access_sample_rate ?? 0.01
    return rate <= 0 ? OFF : { on: true, sample: () => Math.random() < rate }
  }
  return OFF
}

export function createLogger(settings: LogLevel | LogSettings, options: LoggerOptions = {}): Logger {
  const s: LogSettings = typeof settings === 'string' ? { level: settings } : settings
  const sync = options.sync ?? process.env.NODE_ENV === 'test'
  const destination = options.destination ?? pino.destination({ dest: 1, sync, minLength: sync ? 0 : 4096 })
  const root = pino(
    {
      level: s.level,
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // errWithCause keeps the stack and the cause chain as objects (the default flattens causes).
      serializers: { err: pino.stdSerializers.errWithCause },
      redact: { paths: REDACT_PATHS, censor: '[Redacted]' },
      // The active span's trace id, when tracing is on and a span is current (API requests, jobs).
      mixin: traceLogFields,
    },
    destination,
  )
  return wrap(root, s.level, accessLog(s))
}

function wrap(p: pino.Logger, level: LogLevel, access: AccessLog): Logger {
  return {
    level,
    access,
    debug: (msg, fields) => (fields === undefined ? p.debug(msg) : p.debug(fields, msg)),
    info: (msg, fields) => (fields === undefined ? p.info(msg) : p.info(fields, msg)),
    warn: (msg, fields) => (fields === undefined ? p.warn(msg) : p.warn(fields, msg)),
    error: (msg, fields) => (fields === undefined ? p.error(msg) : p.error(fields, msg)),
    child: (fields) => wrap(p.child(fields), level, access),
    flush: () => p.flush(),
  }
}
