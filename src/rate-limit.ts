// Token buckets per key (a client address) with bounded memory: an lru-cache forgets the least recently
// seen key first, so a flood of addresses costs at most max_keys entries. The clock is injected for tests.
import { LRUCache } from 'lru-cache'

export interface BucketSettings {
  /** Requests allowed at once. */
  burst: number
  /** Sustained rate; 0 = unlimited (the limiter is not built). */
  per_minute: number
}

export type RateDecision =
  | { ok: true; remaining: number }
  /** retryAfterS: whole seconds until one request is allowed again. */
  | { ok: false; retryAfterS: number }

interface Bucket {
  tokens: number
  atMs: number
}

export class RateLimiter {
  readonly name: string
  readonly burst: number
  readonly perMinute: number
  readonly #refillPerMs: number
  readonly #buckets: LRUCache<string, Bucket>
  readonly #now: () => number
  /** The RateLimit-Policy value (IETF draft-ietf-httpapi-ratelimit-headers-08+: quota q per window w seconds). */
  readonly policyHeader: string

  constructor(name: string, settings: BucketSettings, options: { maxKeys: number; now?: () => number }) {
    this.name = name
    this.burst = settings.burst
    this.perMinute = settings.per_minute
    this.#refillPerMs = settings.per_minute / 60_000
    this.#buckets = new LRUCache({ max: options.maxKeys })
    this.#now = options.now ?? Date.now
    this.policyHeader = `"${name}";q=${settings.per_minute};w=60`
  }

  /** Spends one token for `key`, or says how long until one is back. */
  take(key: string): RateDecision {
    const bucket = this.#refill(key)
    if (bucket.tokens < 1) return { ok: false, retryAfterS: this.#secondsUntilToken(bucket) }
    bucket.tokens -= 1
    return { ok: true, remaining: Math.floor(bucket.tokens) }
  }

  /** Whether `key` could spend a token now, without spending it (failed attempts are charged after). */
  check(key: string): RateDecision {
    const bucket = this.#buckets.get(key)
    if (bucket === undefined) return { ok: true, remaining: this.burst }
    const tokens = Math.min(this.burst, bucket.tokens + (this.#now() - bucket.atMs) * this.#refillPerMs)
    if (tokens < 1) return { ok: false, retryAfterS: this.#secondsUntilToken({ tokens, atMs: 0 }) }
    return { ok: true, remaining: Math.floor(tokens) }
  }

  /** The RateLimit header value for a refusal: nothing remaining, t = seconds until a request passes. */
  limitHeader(retryAfterS: number): string {
    return `"${this.name}";r=0;t=${retryAfterS}`
  }

  #refill(key: string): Bucket {
    const now = this.#now()
    let bucket = this.#buckets.get(key)
    if (bucket === undefined) {
      bucket = { tokens: this.burst, atMs: now }
      this.#buckets.set(key, bucket)
      return bucket
    }
    bucket.tokens = Math.min(this.burst, bucket.tokens + (now - bucket.atMs) * this.#refillPerMs)
    bucket.atMs = now
    return bucket
  }

  #secondsUntilToken(bucket: Bucket): number {
    return Math.max(1, Math.ceil((1 - bucket.tokens) / this.#refillPerMs / 1000))
  }
}

export interface RateLimitSettings {
  enabled: boolean
  max_keys: number
}

/** A limiter for one surface, or null when limits are off or the surface's per_minute is 0. */
export function createRateLimiter(
  name: string,
  all: RateLimitSettings,
  settings: BucketSettings,
  now?: () => number,
): RateLimiter | null {
  if (!all.enabled || settings.per_minute === 0) return null
  return new RateLimiter(name, settings, { maxKeys: all.max_keys, now })
}

/** Headers of a 429 answer: Retry-After and the IETF RateLimit-Policy / RateLimit pair. */
export function rateLimitedHeaders(limiter: RateLimiter, retryAfterS: number): Array<[string, string]> {
  return [
    ['retry-after', String(retryAfterS)],
    ['ratelimit-policy', limiter.policyHeader],
    ['ratelimit', limiter.limitHeader(retryAfterS)],
  ]
}

/**
 * At most `max` operations in flight per key (a client address): chain look-ups, whose cost (RPC requests,
 * a connection held for the verify wait) a client could otherwise multiply at will. Memory is bounded by
 * what is in flight: a key is forgotten when its count returns to zero.
 */
export class ConcurrencyLimiter {
  readonly #inFlight = new Map<string, number>()

  constructor(readonly max: number) {}

  /** Takes a slot for `key`, or false when it already holds `max`. */
  acquire(key: string): boolean {
    const n = this.#inFlight.get(key) ?? 0
    if (n >= this.max) return false
    this.#inFlight.set(key, n + 1)
    return true
  }

  release(key: string): void {
    const n = (this.#inFlight.get(key) ?? 1) - 1
    if (n <= 0) this.#inFlight.delete(key)
    else this.#inFlight.set(key, n)
  }

  /** Keys holding at least one slot (tests, metrics). */
  get size(): number {
    return this.#inFlight.size
  }
}
