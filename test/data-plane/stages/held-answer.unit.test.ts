// The held answer's bound: a body within held_answer_max_bytes waits for its settlement's headers; one that
// grows past it is let go at once with the pending headers (and settles nothing before the answer); a
// content-length above the bound is never held; a settlement that fails falls back to the pending headers.
import { describe, expect, it } from 'vitest'
import { fitsHeld, HeldAnswer } from '../../../src/data-plane/stages/held-answer.ts'

const PENDING: Array<[string, string]> = [['payment-response', 'pending']]
const SETTLED: Array<[string, string]> = [['payment-response', 'settled']]

function call(settle: () => Promise<Array<[string, string]>>) {
  const calls = { pending: 0, settle: 0 }
  return {
    calls,
    hooks: {
      pending: () => {
        calls.pending++
        return PENDING
      },
      settle: () => {
        calls.settle++
        return settle()
      },
    },
  }
}

describe('HeldAnswer', () => {
  it('within the bound: the head waits for the settlement, settled once', async () => {
    const c = call(() => Promise.resolve(SETTLED))
    const held = new HeldAnswer(100, c.hooks)
    held.onData(Buffer.alloc(60))
    held.onData(Buffer.alloc(40))
    held.onEnd()
    held.onEnd()
    expect(await held.head).toBe(SETTLED)
    expect(c.calls).toEqual({ pending: 0, settle: 1 })
  })

  it('past the bound: the head goes at once with the pending receipt, and the end settles nothing here', async () => {
    const c = call(() => Promise.resolve(SETTLED))
    const held = new HeldAnswer(100, c.hooks)
    held.onData(Buffer.alloc(60))
    held.onData(Buffer.alloc(41))
    expect(await held.head).toBe(PENDING)
    held.onData(Buffer.alloc(500))
    held.onEnd()
    expect(c.calls).toEqual({ pending: 1, settle: 0 })
  })

  it('a settlement that rejects still lets the head go, pending', async () => {
    const c = call(() => Promise.reject(new Error('rpc down')))
    const held = new HeldAnswer(100, c.hooks)
    held.onEnd()
    expect(await held.head).toBe(PENDING)
  })

  it('a content-length above the bound is never held; none, or one within it, may be', () => {
    const head = (len: string | null) =>
      [['content-type', 'text/event-stream'], ...(len === null ? [] : [['Content-Length', len]])]
        .flat()
        .map((s) => Buffer.from(s))
    expect(fitsHeld(head(null), 100)).toBe(true)
    expect(fitsHeld(head('100'), 100)).toBe(true)
    expect(fitsHeld(head('101'), 100)).toBe(false)
  })
})
