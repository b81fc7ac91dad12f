// The verifier refuses a proof older than the stored retention horizon whatever its configured maximum age:
// its claim row may be gone (pruned under an earlier, shorter age), so nothing else would refuse it.
import { describe, expect, it } from 'vitest'
import { createVerifiedTransferCache } from '../../src/schemes/caches.ts'
import { Verifier } from '../../src/schemes/verifier.ts'
import { parseProof } from '../../src/wire/proof.ts'

const HOUR = 3_600_000
const NOW = 1_800_000_000_000
const TREASURY = `0x${'7'.repeat(40)}` as const
const HASH = `0x${'a'.repeat(64)}` as const

function verifier(refusedBefore: { tx: number; eip3009: number }) {
  const verified = createVerifiedTransferCache({
    endpoints_max: 1,
    verified_transfers_max: 10,
    claimed_proofs_max: 1,
  })
  // A transfer ten minutes old: young by a one-hour maximum age.
  verified.set(HASH, {
    hash: HASH,
    from: `0x${'1'.repeat(40)}`,
    value: 1000n,
    blockNumber: 1n,
    timestampMs: NOW - 10 * 60_000,
  })
  return new Verifier({
    verified,
    maxProofAgeMs: HOUR,
    horizons: { refusedBeforeMs: (kind) => refusedBefore[kind] },
    now: () => NOW,
    lookupTransfer: async () => ({ ok: false, reason: 'payment_pending' }),
    checkAuthorization: async () => ({ ok: true }) as never,
    x402: {
      networks: ['local'],
      chainId: 31337,
      treasury: TREASURY,
      usdc: { address: `0x${'2'.repeat(40)}`, name: 'USDC', version: '2' },
    },
  })
}

function authorizationHeader(validBeforeS: number): string {
  const payload = {
    x402Version: 1,
    scheme: 'exact',
    network: 'local',
    payload: {
      signature: `0x${'0'.repeat(130)}`,
      authorization: {
        from: `0x${'1'.repeat(40)}`,
        to: TREASURY,
        value: '1000',
        validAfter: '0',
        validBefore: String(validBeforeS),
        nonce: `0x${'3'.repeat(64)}`,
      },
    },
  }
  return Buffer.from(JSON.stringify(payload)).toString('base64')
}

describe('verifier and the stored retention horizon', () => {
  it('accepts a transaction younger than both the age and the horizon', () => {
    const r = verifier({ tx: NOW - 20 * 60_000, eip3009: 0 }).verify(parseProof(HASH))
    expect(r).toMatchObject({ ok: true, timestampMs: NOW - 10 * 60_000 })
  })

  it('refuses a transaction older than the horizon though younger than the configured age', () => {
    const r = verifier({ tx: NOW - 5 * 60_000, eip3009: 0 }).verify(parseProof(HASH))
    expect(r).toEqual({ ok: false, reason: 'proof_too_old' })
  })

  it('refuses an authorization whose validBefore is under the horizon, before anything else is checked', async () => {
    const validBefore = Math.floor(NOW / 1000) + 600
    const r = await verifier({ tx: 0, eip3009: (validBefore + 1) * 1000 }).verify(
      parseProof(authorizationHeader(validBefore)),
    )
    expect(r).toEqual({ ok: false, reason: 'authorization_expired' })
    // Above the horizon it goes on to the signature check (this one is not signed).
    const past = await verifier({ tx: 0, eip3009: (validBefore - 1) * 1000 }).verify(
      parseProof(authorizationHeader(validBefore)),
    )
    expect(past).toEqual({ ok: false, reason: 'invalid_signature' })
  })
})
