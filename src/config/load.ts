// Builds the one Config: config/default.json → config/<NODE_ENV>.json → $TOLLGATE_CONFIG → environment; validated, frozen.
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import * as v from 'valibot'
import { type Config, ConfigSchema, type Settings } from './schema.ts'

export class ConfigError extends Error {
  readonly code = 'TOLLGATE_CONFIG_INVALID'
}

const CONFIG_DIR = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'config')

type Env = Record<string, string | undefined>

/** Environment variable → setting path and how to read its text. Secrets are handled apart. */
const ENV_SETTINGS: ReadonlyArray<[name: string, path: string, kind: 'string' | 'int' | 'bool' | 'list']> = [
  ['PORT', 'server.port', 'int'],
  ['ADMIN_PORT', 'server.admin_port', 'int'],
  ['ADMIN_HOST', 'admin.host', 'string'],
  ['HOST', 'server.host', 'string'],
  ['PUBLIC_URL', 'server.public_url', 'string'],
  ['THREADS', 'server.threads', 'int'],
  ['WORKERS', 'server.workers', 'int'],
  ['DATABASE_URL', 'database.url', 'string'],
  ['REQUIRE_SYNCHRONOUS_STANDBY', 'database.require_synchronous_standby', 'bool'],
  ['NETWORK', 'chain.network', 'string'],
  ['RPC_URL', 'chain.rpc_url', 'string'],
  ['USDC_ADDRESS', 'chain.usdc_address', 'string'],
  ['ALLOW_PRIVATE_UPSTREAMS', 'proxy.allow_private_upstreams', 'bool'],
  ['ACCEPT_CHUNKED_REQUESTS', 'server.accept_chunked_requests', 'bool'],
  ['UPSTREAM_CLIENT', 'proxy.upstream_client', 'string'],
  // Comma-separated: TRUSTED_PROXIES=10.0.0.0/8,fd00::/8
  ['TRUSTED_PROXIES', 'server.trusted_proxies', 'list'],
  ['LOG_LEVEL', 'log.level', 'string'],
  ['LOG_ACCESS', 'log.access', 'string'],
  ['OTEL_EXPORTER_OTLP_ENDPOINT', 'tracing.otlp_endpoint', 'string'],
  ['OTEL_SERVICE_NAME', 'tracing.service_name', 'string'],
]

export interface LoadOptions {
  env?: Env
  /** Extra settings merged last (tests use this instead of files). */
  overrides?: DeepPartial<Settings>
  configDir?: string
}

export type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? DeepPartial<T[K]> : T[K] }

export function loadConfig(options: LoadOptions = {}): Config {
  const env = options.env ?? process.env
  const dir = options.configDir ?? CONFIG_DIR
  let merged = readJson(join(dir, 'default.json'))
  const nodeEnv = env.NODE_ENV
  if (nodeEnv && existsSync(join(dir, `${nodeEnv}.json`))) {
    merged = deepMerge(merged, readJson(join(dir, `${nodeEnv}.json`)))
  }
  if (env.TOLLGATE_CONFIG) merged = deepMerge(merged, readJson(resolve(env.TOLLGATE_CONFIG)))
  merged = deepMerge(merged, envSettings(env))
  if (options.overrides) merged = deepMerge(merged, options.overrides as Record<string, unknown>)

  const parsed = v.safeParse(ConfigSchema, merged)
  if (!parsed.success) {
    const lines = parsed.issues.map((issue) => {
      const path = issue.path?.map((p) => String(p.key)).join('.') ?? '(root)'
      return `  ${path}: ${issue.message}`
    })
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`)
  }
  const settings = parsed.output
  if (settings.chain.network !== 'local' && !settings.chain.rpc_url) {
    throw new ConfigError(
      `invalid configuration:\n  chain.rpc_url: required on network ${settings.chain.network} (set RPC_URL)`,
    )
  }
  if (settings.server.threads > 1) {
    throw new ConfigError(
      'invalid configuration:\n  server.threads: must be 1 (this uWebSockets.js build cannot share a port between threads); run several tollgate processes behind a load balancer on one PostgreSQL server instead',
    )
  }
  refuseClaimDeadlineAfterStatementTimeout(settings)
  const { key, source } = treasuryKey(env)
  if (key !== null && !/^0x[0-9a-fA-F]{64}$/.test(key)) {
    // Never echo the value: it is a secret.
    throw new ConfigError(`invalid configuration:\n  ${source}: must be 0x followed by 64 hex digits`)
  }
  if (key === null && settings.chain.network !== 'local') {
    throw new ConfigError(
      `invalid configuration:\n  TREASURY_PRIVATE_KEY: required on network ${settings.chain.network} (or TREASURY_PRIVATE_KEY_FILE naming a file that holds it)`,
    )
  }
  const settlerKey = env.SETTLER_PRIVATE_KEY?.trim() || null
  if (settlerKey !== null && !/^0x[0-9a-fA-F]{64}$/.test(settlerKey)) {
    throw new ConfigError(
      'invalid configuration:\n  SETTLER_PRIVATE_KEY: must be 0x followed by 64 hex digits',
    )
  }
  if (settings.settlement.before_answer.enabled && settlerKey === null) {
    throw new ConfigError(
      'invalid configuration:\n  settlement.before_answer.enabled: needs SETTLER_PRIVATE_KEY (an account with gas, not the treasury)',
    )
  }
  if (settlerKey !== null && key !== null && settlerKey.toLowerCase() === key.toLowerCase()) {
    throw new ConfigError(
      'invalid configuration:\n  SETTLER_PRIVATE_KEY: must not be the treasury key (their nonces would collide)',
    )
  }
  const adminToken = env.ADMIN_TOKEN?.trim() || null
  if (adminToken !== null && adminToken.length < 24) {
    throw new ConfigError(
      'invalid configuration:\n  ADMIN_TOKEN: must be at least 24 characters (e.g. openssl rand -hex 24)',
    )
  }
  const receiptKey = env.RECEIPT_SIGNING_KEY?.trim() || null
  if (receiptKey !== null && !/^0x[0-9a-fA-F]{64}$/.test(receiptKey)) {
    throw new ConfigError(
      'invalid configuration:\n  RECEIPT_SIGNING_KEY: must be 0x followed by 64 hex digits',
    )
  }
  const previousSigners = (env.RECEIPT_PREVIOUS_SIGNERS ?? '')
    .split(',')
    .map((a) => a.trim())
    .filter((a) => a !== '')
  const badSigner = previousSigners.find((a) => !/^0x[0-9a-fA-F]{40}$/.test(a))
  if (badSigner !== undefined) {
    throw new ConfigError(
      `invalid configuration:\n  RECEIPT_PREVIOUS_SIGNERS: ${badSigner} is not an address (comma-separated 0x… addresses)`,
    )
  }
  const secrets = Object.freeze({
    treasury_private_key: key as `0x${string}` | null,
    settler_private_key: settlerKey as `0x${string}` | null,
    admin_token: adminToken,
    receipt_signing_key: receiptKey as `0x${string}` | null,
    receipt_previous_signers: Object.freeze(previousSigners),
  })
  // Non-enumerable so that logging or serialising the config never prints the key.
  const config = { ...settings } as Config
  Object.defineProperty(config, 'secrets', { value: secrets, enumerable: false })
  return deepFreeze(config)
}

/**
 * The treasury key from TREASURY_PRIVATE_KEY, or from the file TREASURY_PRIVATE_KEY_FILE names (the Docker
 * secrets convention: /run/secrets/<name>). Never both: which one wins would be a guess. Errors name the
 * setting and the path, never the file's content.
 */
function treasuryKey(env: Env): { key: string | null; source: string } {
  const inline = env.TREASURY_PRIVATE_KEY?.trim() || null
  const file = env.TREASURY_PRIVATE_KEY_FILE?.trim() || null
  if (inline !== null && file !== null) {
    throw new ConfigError(
      'invalid configuration:\n  TREASURY_PRIVATE_KEY, TREASURY_PRIVATE_KEY_FILE: set one of them, not both',
    )
  }
  if (file === null) return { key: inline, source: 'TREASURY_PRIVATE_KEY' }
  let text: string
  try {
    text = readFileSync(resolve(file), 'utf8')
  } catch (cause) {
    const reason = (cause as NodeJS.ErrnoException).code ?? 'unreadable'
    throw new ConfigError(
      `invalid configuration:\n  TREASURY_PRIVATE_KEY_FILE: cannot read ${file} (${reason})`,
      { cause },
    )
  }
  const key = text.trim()
  if (key === '')
    throw new ConfigError(`invalid configuration:\n  TREASURY_PRIVATE_KEY_FILE: ${file} is empty`)
  return { key, source: `TREASURY_PRIVATE_KEY_FILE (${file})` }
}

function envSettings(env: Env): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [name, path, kind] of ENV_SETTINGS) {
    const raw = env[name]
    if (raw === undefined || raw === '') continue
    let value: unknown = raw
    if (kind === 'int') value = /^-?\d+$/.test(raw.trim()) ? Number(raw) : raw
    if (kind === 'bool')
      value = /^(1|true|yes)$/i.test(raw) ? true : /^(0|false|no)$/i.test(raw) ? false : raw
    if (kind === 'list')
      value = raw
        .split(',')
        .map((entry) => entry.trim())
        .filter((entry) => entry !== '')
    setPath(out, path, value)
  }
  return out
}

function readJson(file: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(file, 'utf8'))
  } catch (cause) {
    throw new ConfigError(`cannot read config file ${file}: ${(cause as Error).message}`, { cause })
  }
}

function setPath(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.')
  let node = target
  for (const key of keys.slice(0, -1)) {
    node[key] ??= {}
    node = node[key] as Record<string, unknown>
  }
  node[keys.at(-1)!] = value
}

function isPlainObject(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x)
}

function deepMerge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base }
  for (const [key, value] of Object.entries(over)) {
    out[key] = isPlainObject(value) && isPlainObject(out[key]) ? deepMerge(out[key], value) : value
  }
  return out
}

function deepFreeze<T>(x: T): T {
  if (typeof x === 'object' && x !== null && !Object.isFrozen(x)) {
    Object.freeze(x)
    for (const value of Object.values(x)) deepFreeze(value)
  }
  return x
}

/** The base every public URL is built on (payment_url, metered_url), without a trailing slash. */
export function publicBaseUrl(config: Config, listeningPort: number): string {
  if (config.server.public_url) return config.server.public_url.replace(/\/+$/, '')
  const host = config.server.host === '0.0.0.0' ? '127.0.0.1' : config.server.host
  return `http://${host}:${listeningPort}`
}

/**
 * With a synchronous standby, PostgreSQL reports a COMMIT whose wait for the standby was cancelled (by
 * statement_timeout) as a success, committed on the primary only. A claim must therefore give up on the
 * client side first: a claim that wins after its call gave up is released, never served, so a claim the
 * standby may not hold is never acted on.
 */
function refuseClaimDeadlineAfterStatementTimeout(settings: {
  database: { statement_timeout_ms: number }
  claims: { timeout_ms: number }
}): void {
  const statementMs = settings.database.statement_timeout_ms
  if (statementMs > 0 && (settings.claims.timeout_ms === 0 || settings.claims.timeout_ms >= statementMs)) {
    throw new ConfigError(
      `invalid configuration:\n  claims.timeout_ms: must be above 0 and below database.statement_timeout_ms (${statementMs}) while that is set, so that a claim whose commit the database cut short is never served`,
    )
  }
}
