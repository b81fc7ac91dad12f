// Settler slot keys: derived from one secret, distinct per slot, stable across processes, never the treasury's.
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { settlerSlotKey } from '../../src/chain/settler-keys.ts'
import { settleBeforeAnswerUnavailable } from '../../src/config/settle-before-answer.ts'

const TREASURY = `0x${'11'.repeat(32)}` as const
const SETTLER = `0x${'22'.repeat(32)}` as const

describe('settler slot keys', () => {
  it('derive from the treasury key alone: distinct per slot, the same every time, never the treasury key', () => {
    const seed = { settlerKey: null, treasuryKey: TREASURY }
    const keys = Array.from({ length: 16 }, (_, i) => settlerSlotKey(seed, i)!)
    expect(new Set(keys).size).toBe(16)
    expect(keys).not.toContain(TREASURY)
    expect(settlerSlotKey(seed, 3)).toBe(keys[3])
    // Each is a valid secp256k1 key.
    for (const k of keys) expect(privateKeyToAccount(k).address).toMatch(/^0x[0-9a-fA-F]{40}$/)
  })

  it('SETTLER_PRIVATE_KEY is slot 0 itself (a funded settler keeps working) and the root of the others', () => {
    const seed = { settlerKey: SETTLER, treasuryKey: TREASURY }
    expect(settlerSlotKey(seed, 0)).toBe(SETTLER)
    const one = settlerSlotKey(seed, 1)!
    expect(one).not.toBe(settlerSlotKey({ settlerKey: null, treasuryKey: TREASURY }, 1))
    expect(one).not.toBe(SETTLER)
  })

  it('no secret, no key', () => {
    expect(settlerSlotKey({ settlerKey: null, treasuryKey: null }, 0)).toBeNull()
  })

  it('the service can settle before the answer with any secret, and with workers > 1', () => {
    const secrets = { settler_private_key: null, treasury_private_key: TREASURY }
    expect(settleBeforeAnswerUnavailable({ secrets, chain: { network: 'base' } } as never)).toBeNull()
    expect(
      settleBeforeAnswerUnavailable({
        secrets: { settler_private_key: null, treasury_private_key: null },
        chain: { network: 'base' },
      } as never),
    ).toMatch(/SETTLER_PRIVATE_KEY/)
  })
})
