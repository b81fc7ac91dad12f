// A worker's start waits for its parent's embedded database while it is only unreachable, within a budget;
// any other error fails the start at once.
import { describe, expect, it } from 'vitest'
import { untilReachable } from '../../src/db/first-reach.ts'

const unreachable = () =>
  Object.assign(new Error('write CONNECT_TIMEOUT 127.0.0.1:5'), { code: 'CONNECT_TIMEOUT' })

describe('untilReachable', () => {
  it('retries while the database cannot be reached, then answers', async () => {
    let calls = 0
    const retries: number[] = []
    const out = await untilReachable(
      async () => {
        calls++
        if (calls < 3) throw unreachable()
        return 'migrated'
      },
      { budgetMs: 5_000, pauseMs: 5, onRetry: (_err, attempt) => retries.push(attempt) },
    )
    expect(out).toBe('migrated')
    expect(calls).toBe(3)
    expect(retries).toEqual([1, 2])
  })

  it('fails at once on an error that is not about reaching the database', async () => {
    let calls = 0
    const bad = Object.assign(new Error('syntax error'), { code: '42601' })
    await expect(
      untilReachable(
        async () => {
          calls++
          throw bad
        },
        { budgetMs: 5_000, pauseMs: 5 },
      ),
    ).rejects.toBe(bad)
    expect(calls).toBe(1)
  })

  it('gives up with the last error once the budget is spent', async () => {
    let calls = 0
    const started = Date.now()
    await expect(
      untilReachable(
        async () => {
          calls++
          throw unreachable()
        },
        { budgetMs: 60, pauseMs: 10 },
      ),
    ).rejects.toMatchObject({ code: 'CONNECT_TIMEOUT' })
    expect(calls).toBeGreaterThan(1)
    expect(Date.now() - started).toBeLessThan(1_000)
  })
})
