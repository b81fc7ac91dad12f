// The discovery routes' answers: fresh for the TTL, then served stale (up to twice the TTL) while one read
// refreshes them; a read shared by every request that waits for it; a failed refresh costs no answer.
import { describe, expect, it } from 'vitest'
import { answerCache } from '../../src/data-plane/discovery.ts'
import type { Logger } from '../../src/observability/logger.ts'

const TTL = 5_000

function harness() {
  let clock = 1_000_000
  const errors: string[] = []
  const logger = { error: (msg: string) => errors.push(msg) } as unknown as Logger
  const cache = answerCache(TTL, () => clock, logger)
  let reads = 0
  let release: Array<(v: unknown) => void> = []
  let fail: Array<(e: unknown) => void> = []
  /** A read that stays in flight until `settle` (or `reject`) ends it. */
  const build = () => {
    reads++
    return new Promise<unknown>((resolve, reject) => {
      release.push(resolve)
      fail.push(reject)
    })
  }
  return {
    cache,
    build,
    errors,
    reads: () => reads,
    advance: (ms: number) => {
      clock += ms
    },
    settle: async (value: unknown) => {
      for (const r of release) r(value)
      release = []
      fail = []
      await new Promise((r) => setImmediate(r))
    },
    reject: async (err: unknown) => {
      for (const f of fail) f(err)
      release = []
      fail = []
      await new Promise((r) => setImmediate(r))
    },
  }
}

describe('answerCache', () => {
  it('shares one read among the requests that find nothing kept, then answers from memory', async () => {
    const h = harness()
    const a = h.cache('k', h.build)
    const b = h.cache('k', h.build)
    expect(h.reads()).toBe(1)
    await h.settle({ n: 1 })
    expect((await a).body).toBe('{"n":1}')
    expect((await b).body).toBe('{"n":1}')
    h.advance(TTL - 1)
    expect((await h.cache('k', h.build)).body).toBe('{"n":1}')
    expect(h.reads()).toBe(1)
  })

  it('past the TTL answers the kept answer at once and refreshes it with one read', async () => {
    const h = harness()
    const first = h.cache('k', h.build)
    await h.settle('one')
    await first
    h.advance(TTL + 1)
    const stale = await h.cache('k', h.build)
    const again = await h.cache('k', h.build)
    expect(stale.body).toBe('one')
    expect(again.body).toBe('one')
    expect(h.reads()).toBe(2)
    await h.settle('two')
    expect((await h.cache('k', h.build)).body).toBe('two')
    expect(h.reads()).toBe(2)
  })

  it('never answers older than twice the TTL: past it the request waits for the read', async () => {
    const h = harness()
    const first = h.cache('k', h.build)
    await h.settle('one')
    await first
    h.advance(2 * TTL)
    let answered: string | null = null
    const waiting = h.cache('k', h.build).then((a) => {
      answered = a.body
    })
    await new Promise((r) => setImmediate(r))
    expect(answered).toBeNull()
    await h.settle('two')
    await waiting
    expect(answered).toBe('two')
  })

  it('a failed refresh is logged and the kept answer still serves until it is too old', async () => {
    const h = harness()
    const first = h.cache('k', h.build)
    await h.settle('one')
    await first
    h.advance(TTL + 1)
    expect((await h.cache('k', h.build)).body).toBe('one')
    await h.reject(new Error('database gone'))
    expect(h.errors).toEqual(['discovery refresh failed'])
    expect((await h.cache('k', h.build)).body).toBe('one')
    h.advance(TTL)
    const late = h.cache('k', h.build)
    await h.reject(new Error('still gone'))
    await expect(late).rejects.toThrow('still gone')
  })

  it('keys are kept apart', async () => {
    const h = harness()
    const a = h.cache('a', h.build)
    const b = h.cache('b', h.build)
    expect(h.reads()).toBe(2)
    await h.settle('x')
    await Promise.all([a, b])
  })
})
