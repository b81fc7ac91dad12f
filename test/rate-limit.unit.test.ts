import { describe, expect, it } from 'vitest'
import { createRateLimiter, RateLimiter, rateLimitedHeaders } from '../src/rate-limit.ts'

describe('token bucket', () => {
  it('allows a burst, refuses the next with the seconds until a token is back, refills with the clock', () => {
    let now = 1_000_000
    const limiter = new RateLimiter('t', { burst: 3, per_minute: 6 }, { maxKeys: 10, now: () => now })
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 2 })
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 1 })
    expect(limiter.take('a')).toEqual({ ok: true, remaining: 0 })
    // 6 a minute: one token every 10 s.
    expect(limiter.take('a')).toEqual({ ok: false, retryAfterS: 10 })
    now += 4_000
    expect(limiter.take('a')).toEqual({ ok: false, retryAfterS: 6 })
    now += 6_000
    expect(limiter.take('a').ok).toBe(true)
    // Another key has its own bucket.
    expect(limiter.take('b')).toEqual({ ok: true, remaining: 2 })
    // A long pause refills up to the burst, not beyond.
    now += 3_600_000
    for (let i = 0; i < 3; i++) expect(limiter.take('a').ok).toBe(true)
    expect(limiter.take('a').ok).toBe(false)
  })

  it('check() looks without spending', () => {
    let now = 0
    const limiter = new RateLimiter('t', { burst: 1, per_minute: 60 }, { maxKeys: 10, now: () => now })
    expect(limiter.check('a').ok).toBe(true)
    expect(limiter.check('a').ok).toBe(true)
    limiter.take('a')
    expect(limiter.check('a')).toEqual({ ok: false, retryAfterS: 1 })
    now += 1000
    expect(limiter.check('a').ok).toBe(true)
  })

  it('keeps at most maxKeys buckets (the least recently seen is forgotten)', () => {
    const limiter = new RateLimiter('t', { burst: 1, per_minute: 1 }, { maxKeys: 2, now: () => 0 })
    limiter.take('a')
    limiter.take('b')
    limiter.take('c') // evicts a
    expect(limiter.take('a').ok).toBe(true)
    expect(limiter.take('c').ok).toBe(false)
  })

  it('is off when disabled or when a surface has per_minute 0', () => {
    const surface = { burst: 1, per_minute: 1 }
    expect(createRateLimiter('x', { enabled: false, max_keys: 5 }, surface)).toBeNull()
    expect(createRateLimiter('x', { enabled: true, max_keys: 5 }, { burst: 1, per_minute: 0 })).toBeNull()
    expect(createRateLimiter('x', { enabled: true, max_keys: 5 }, surface)).toBeInstanceOf(RateLimiter)
  })

  it('answers with Retry-After and the IETF RateLimit-Policy / RateLimit fields', () => {
    const limiter = new RateLimiter('register', { burst: 10, per_minute: 10 }, { maxKeys: 1 })
    expect(rateLimitedHeaders(limiter, 7)).toEqual([
      ['retry-after', '7'],
      ['ratelimit-policy', '"register";q=10;w=60'],
      ['ratelimit', '"register";r=0;t=7'],
    ])
  })
})
