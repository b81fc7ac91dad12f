// Keys from the HTTP message signatures directories the operator allows, kept in memory. The request path
// only reads this cache: a directory or key it does not hold yet makes the call unverified and schedules a
// fetch in the background (SSRF rules of upstreams apply), so a slow or hostile directory never delays a call.
import { Agent } from 'undici'
import { checkTargetUrl, guardedConnector } from '../ssrf.ts'
import { type PublishedKey, readJwk } from './jwk.ts'

export interface AllowedDirectory {
  /** The operator's name for this signer: rules match it, metrics label by it. */
  name: string
  /** The origin the agent sends in Signature-Agent (e.g. https://bot.example). */
  signatureAgent: string
  /** Where the directory is fetched; defaults to the origin's /.well-known path. */
  url: string
}

export interface DirectoryPolicy {
  allowPrivate: boolean
  fetchTimeoutMs: number
  /** Bounds on the Cache-Control max-age a directory sends; `defaultTtlMs` when it sends none. */
  minTtlMs: number
  maxTtlMs: number
  defaultTtlMs: number
  /** After a failed fetch, or a key the directory did not list, the soonest the next fetch may start. */
  retryMs: number
  maxBytes: number
}

export type KeyLookup =
  | { status: 'found'; directory: AllowedDirectory; key: PublishedKey }
  | { status: 'directory_not_allowed' }
  | { status: 'directory_unavailable'; directory: AllowedDirectory }
  | { status: 'unknown_key'; directory: AllowedDirectory }

interface Entry {
  directory: AllowedDirectory
  keys: Map<string, PublishedKey> | null
  freshUntil: number
  nextFetchAt: number
  inFlight: Promise<void> | null
  timer: NodeJS.Timeout | null
}

export const DIRECTORY_PATH = '/.well-known/http-message-signatures-directory'

export function directoryUrl(signatureAgent: string): string {
  return new URL(DIRECTORY_PATH, signatureAgent).href
}

export class KeyDirectories {
  readonly #entries = new Map<string, Entry>()
  readonly #policy: DirectoryPolicy
  readonly #agent: Agent | undefined
  #stopped = false

  constructor(policy: DirectoryPolicy, allowed: readonly AllowedDirectory[]) {
    this.#policy = policy
    // Checked again at connect time: DNS may change after checkTargetUrl accepted the host.
    this.#agent = policy.allowPrivate
      ? undefined
      : new Agent({ connect: guardedConnector(policy.fetchTimeoutMs) })
    for (const directory of allowed) {
      this.#entries.set(originOf(directory.signatureAgent), {
        directory,
        keys: null,
        freshUntil: 0,
        nextFetchAt: 0,
        inFlight: null,
        timer: null,
      })
    }
  }

  /** Synchronous: never fetches. A miss schedules a fetch (at most one per retryMs per directory). */
  lookup(signatureAgent: string, keyid: string): KeyLookup {
    // The verifier passes an origin already: look it up as it is before parsing it as a URL.
    const entry = this.#entries.get(signatureAgent) ?? this.#entries.get(originOf(signatureAgent))
    if (entry === undefined) return { status: 'directory_not_allowed' }
    const now = Date.now()
    if (entry.keys === null) {
      this.#schedule(entry, now)
      return { status: 'directory_unavailable', directory: entry.directory }
    }
    if (now >= entry.freshUntil) this.#schedule(entry, now)
    const key = entry.keys.get(keyid)
    if (key === undefined) {
      // The agent may have rotated to a key published after our copy: look again, rate-limited.
      this.#schedule(entry, now)
      return { status: 'unknown_key', directory: entry.directory }
    }
    return { status: 'found', directory: entry.directory, key }
  }

  /** Fetches every directory once (startup); resolves when each has answered or failed. */
  async refreshAll(): Promise<void> {
    await Promise.all([...this.#entries.values()].map((e) => this.#fetch(e)))
  }

  stop(): void {
    this.#stopped = true
    for (const e of this.#entries.values()) if (e.timer) clearTimeout(e.timer)
    void this.#agent?.close()
  }

  #schedule(entry: Entry, now: number): void {
    if (entry.inFlight !== null || now < entry.nextFetchAt || this.#stopped) return
    void this.#fetch(entry)
  }

  #fetch(entry: Entry): Promise<void> {
    entry.inFlight ??= this.#load(entry).finally(() => {
      entry.inFlight = null
    })
    return entry.inFlight
  }

  async #load(entry: Entry): Promise<void> {
    const p = this.#policy
    entry.nextFetchAt = Date.now() + p.retryMs
    const fetched = await fetchDirectory(entry.directory.url, p, this.#agent)
    if (this.#stopped) return
    if (fetched !== null) {
      entry.keys = fetched.keys
      entry.freshUntil = Date.now() + fetched.ttlMs
    }
    // A failed fetch keeps the keys we had (a directory outage must not unverify every agent at once).
    const next = fetched === null ? p.retryMs : fetched.ttlMs
    if (entry.timer) clearTimeout(entry.timer)
    entry.timer = setTimeout(() => void this.#fetch(entry), next)
    entry.timer.unref()
  }
}

function originOf(value: string): string {
  try {
    return new URL(value).origin
  } catch {
    return value
  }
}

async function fetchDirectory(
  url: string,
  p: DirectoryPolicy,
  agent: Agent | undefined,
): Promise<{ keys: Map<string, PublishedKey>; ttlMs: number } | null> {
  const target = await checkTargetUrl(url, { allowPrivate: p.allowPrivate })
  if (!target.ok) return null
  try {
    const res = await fetch(target.url, {
      signal: AbortSignal.timeout(p.fetchTimeoutMs),
      redirect: 'error',
      headers: { accept: 'application/http-message-signatures-directory+json, application/json' },
      ...(agent ? { dispatcher: agent } : {}),
    } as RequestInit)
    if (!res.ok) return null
    const text = await readBounded(res, p.maxBytes)
    if (text === null) return null
    const body = JSON.parse(text) as { keys?: unknown }
    if (!Array.isArray(body.keys)) return null
    const keys = new Map<string, PublishedKey>()
    for (const jwk of body.keys) {
      const k = readJwk(jwk)
      if (k !== null) keys.set(k.keyid, k)
    }
    return { keys, ttlMs: ttlFrom(res.headers.get('cache-control'), p) }
  } catch {
    return null
  }
}

async function readBounded(res: Response, maxBytes: number): Promise<string | null> {
  if (res.body === null) return ''
  const chunks: Uint8Array[] = []
  let total = 0
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    total += chunk.byteLength
    if (total > maxBytes) return null
    chunks.push(chunk)
  }
  return Buffer.concat(chunks).toString('utf8')
}

/** Cache-Control max-age, bounded; no-store/no-cache count as the minimum. */
export function ttlFrom(
  cacheControl: string | null,
  p: Pick<DirectoryPolicy, 'minTtlMs' | 'maxTtlMs' | 'defaultTtlMs'>,
): number {
  if (cacheControl === null) return p.defaultTtlMs
  if (/(^|,)\s*(no-store|no-cache)\b/i.test(cacheControl)) return p.minTtlMs
  const m = /(?:^|,)\s*max-age\s*=\s*"?(\d+)"?/i.exec(cacheControl)
  if (m === null) return p.defaultTtlMs
  return Math.min(p.maxTtlMs, Math.max(p.minTtlMs, Number(m[1]) * 1000))
}
