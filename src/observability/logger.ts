// A small structured logger: one JSON line per event on stdout/stderr. Never pass secrets in fields.
import type { LogLevel } from '../config/schema.ts'

const RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 }

export interface Logger {
  debug(msg: string, fields?: Record<string, unknown>): void
  info(msg: string, fields?: Record<string, unknown>): void
  warn(msg: string, fields?: Record<string, unknown>): void
  error(msg: string, fields?: Record<string, unknown>): void
  child(fields: Record<string, unknown>): Logger
  readonly level: LogLevel
}

export function createLogger(level: LogLevel, base: Record<string, unknown> = {}): Logger {
  const min = RANK[level]
  const write = (lvl: Exclude<LogLevel, 'silent'>, msg: string, fields?: Record<string, unknown>) => {
    if (RANK[lvl] < min) return
    const line = JSON.stringify(
      { time: new Date().toISOString(), level: lvl, msg, ...base, ...fields },
      jsonSafe,
    )
    if (RANK[lvl] >= RANK.warn) process.stderr.write(`${line}\n`)
    else process.stdout.write(`${line}\n`)
  }
  return {
    level,
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
    child: (fields) => createLogger(level, { ...base, ...fields }),
  }
}

function jsonSafe(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString()
  if (value instanceof Error)
    return { name: value.name, message: value.message, code: (value as { code?: unknown }).code }
  return value
}
