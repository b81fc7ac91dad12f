// The one wait of the tests: the first value that is not false/null/undefined, an error ends it unless
// retryErrors, and a timeout names what was awaited (and the last error).
import { describe, expect, it } from 'vitest'
import { waitFor } from './wait-for.ts'

describe('waitFor', () => {
  it('resolves with the first value that holds', async () => {
    let n = 0
    expect(await waitFor(() => (++n >= 3 ? n : null), { what: 'three polls', intervalMs: 1 })).toBe(3)
  })

  it('an error ends the wait at once, unless retryErrors', async () => {
    await expect(
      waitFor(
        () => {
          throw new Error('gone')
        },
        { what: 'x', timeoutMs: 5_000 },
      ),
    ).rejects.toThrow('gone')
    let n = 0
    const v = await waitFor(
      () => {
        if (++n < 3) throw new Error('not listening yet')
        return 'up'
      },
      { what: 'a server', intervalMs: 1, retryErrors: true },
    )
    expect(v).toBe('up')
  })

  it('times out naming what it waited for and the last error', async () => {
    await expect(
      waitFor(
        () => {
          throw new Error('ECONNREFUSED')
        },
        { what: 'Prometheus', timeoutMs: 30, intervalMs: 5, retryErrors: true },
      ),
    ).rejects.toThrow('timed out after 30 ms waiting for Prometheus (last error: ECONNREFUSED)')
  })
})
