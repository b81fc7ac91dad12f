// The eip2612GasSponsoring approval at the boundary: read from the payment payload's extensions (the 402's
// echoed declaration alone is no approval; a full one malformed is a reason), and checked locally against
// the permit it funds and the token's EIP-712 domain, as viem signs it.
import { getAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import {
  PERMIT2_ADDRESS,
  type SponsoredApproval,
  verifySponsoredApproval,
} from '../../src/chain/upto-permit.ts'
import {
  EIP2612_GAS_SPONSORING_DECLARATION,
  parseUptoPayload,
} from '../../src/schemes/upto/permit-payload.ts'

const token = {
  address: getAddress('0x5FbDB2315678afecb367f032d93F642f64180aa3'),
  name: 'USD Coin',
  version: '2',
}
const chainId = 31337
const payer = privateKeyToAccount(generatePrivateKey())
const NOW = 1_800_000_000n
const MAX = 500_000n

async function signed(over: Partial<{ value: bigint; nonce: bigint; deadline: bigint }> = {}) {
  const message = { value: MAX, nonce: 0n, deadline: NOW + 300n, ...over }
  const signature = await payer.signTypedData({
    domain: { name: token.name, version: token.version, chainId, verifyingContract: token.address },
    types: {
      Permit: [
        { name: 'owner', type: 'address' },
        { name: 'spender', type: 'address' },
        { name: 'value', type: 'uint256' },
        { name: 'nonce', type: 'uint256' },
        { name: 'deadline', type: 'uint256' },
      ],
    },
    primaryType: 'Permit',
    message: { owner: payer.address, spender: PERMIT2_ADDRESS, ...message },
  })
  return {
    from: payer.address,
    asset: token.address,
    spender: PERMIT2_ADDRESS,
    ...message,
    signature,
  } satisfies SponsoredApproval
}

const permit = { from: payer.address, token: token.address, amount: MAX }
const check = (approval: SponsoredApproval) =>
  verifySponsoredApproval({ chainId, token, permit, approval, nowSeconds: NOW })

describe('verifySponsoredApproval', () => {
  it('accepts the payer’s approval of Permit2 for the permit’s maximum', async () => {
    expect(await check(await signed())).toEqual({ ok: true })
  })

  it('refuses each term that differs, with the published facilitator’s reason', async () => {
    const good = await signed()
    const other = privateKeyToAccount(generatePrivateKey()).address
    expect(await check({ ...good, from: other })).toEqual({ ok: false, reason: 'eip2612_from_mismatch' })
    expect(await check({ ...good, asset: other })).toEqual({ ok: false, reason: 'eip2612_asset_mismatch' })
    expect(await check({ ...good, spender: other })).toEqual({
      ok: false,
      reason: 'eip2612_spender_not_permit2',
    })
    expect(await check(await signed({ value: MAX - 1n }))).toEqual({
      ok: false,
      reason: 'permit2_2612_amount_mismatch',
    })
    expect(await check(await signed({ deadline: NOW + 5n }))).toEqual({
      ok: false,
      reason: 'eip2612_deadline_expired',
    })
    // Signed over nonce 0, presented as nonce 1: not the payer's signature of these terms.
    expect(await check({ ...good, nonce: 1n })).toEqual({ ok: false, reason: 'invalid_eip2612_signature' })
    expect(await check({ ...good, signature: '0x00' })).toEqual({
      ok: false,
      reason: 'invalid_eip2612_signature',
    })
  })
})

describe('parseUptoPayload and the extension', () => {
  const inner = {
    signature: `0x${'11'.repeat(65)}`,
    permit2Authorization: {
      from: payer.address,
      permitted: { token: token.address, amount: MAX.toString() },
      spender: '0x4020A4f3b7b90ccA423B9fabCc0CE57C6C240002',
      nonce: '7',
      deadline: (NOW + 300n).toString(),
      witness: { to: payer.address, facilitator: payer.address, validAfter: '0' },
    },
  }

  it('reads the 402’s echoed declaration alone as no approval', () => {
    const parsed = parseUptoPayload({
      payload: inner,
      extensions: { eip2612GasSponsoring: EIP2612_GAS_SPONSORING_DECLARATION },
    })
    expect(parsed).toMatchObject({ ok: true, approval: null })
  })

  it('reads a signed approval merged into the declaration', async () => {
    const a = await signed()
    const info = {
      ...EIP2612_GAS_SPONSORING_DECLARATION.info,
      from: a.from,
      asset: a.asset,
      spender: a.spender,
      amount: a.value.toString(),
      nonce: '0',
      deadline: a.deadline.toString(),
      signature: a.signature,
    }
    const parsed = parseUptoPayload({ payload: inner, extensions: { eip2612GasSponsoring: { info } } })
    expect(parsed).toMatchObject({ ok: true, approval: a })
  })

  it('refuses a full approval with a malformed field, never throws', () => {
    const info = {
      from: payer.address,
      asset: token.address,
      spender: PERMIT2_ADDRESS,
      amount: '-1',
      nonce: '0',
      deadline: '1',
      signature: '0x12',
      version: '1',
    }
    const parsed = parseUptoPayload({ payload: inner, extensions: { eip2612GasSponsoring: { info } } })
    expect(parsed.ok).toBe(false)
    expect(parseUptoPayload({ payload: inner, extensions: { eip2612GasSponsoring: null } })).toMatchObject({
      ok: true,
      approval: null,
    })
  })
})
