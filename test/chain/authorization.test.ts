// Local checks of an EIP-3009 authorization: pure crypto against an injected clock, no chain needed.
import { type Address, type Hex, hexToBigInt, numberToHex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import {
  createAuthorizationNonce,
  signTransferAuthorization,
  verifyTransferAuthorization,
} from '../../src/chain/authorization.ts'

const usdc = {
  address: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  name: 'USDC',
  version: '2',
} as const
const chainId = 84532
const payTo = '0x70997970C51812dc3A010C7d01b50e0d17dc79C8'
const now = 1_800_000_000n
const payer = privateKeyToAccount(generatePrivateKey())

const signed = (
  over: { to?: `0x${string}`; value?: bigint; validAfter?: bigint; validBefore?: bigint } = {},
) =>
  signTransferAuthorization(payer, {
    usdc,
    chainId,
    to: over.to ?? payTo,
    value: over.value ?? 10_000n,
    validAfter: over.validAfter ?? now - 600n,
    validBefore: over.validBefore ?? now + 60n,
    nonce: createAuthorizationNonce(),
  })

const check = (s: { authorization: any; signature: Hex }, minValue = 10_000n, to: Address = payTo) =>
  verifyTransferAuthorization({ usdc, chainId, ...s, payTo: to, minValue, nowSeconds: now })

describe('verifyTransferAuthorization', () => {
  it('accepts a well-formed authorization and names the payer', async () => {
    expect(await check(await signed())).toEqual({ ok: true, payer: payer.address })
  })

  it('refuses a signature over other fields, another domain, or its high-s twin', async () => {
    const s = await signed()
    expect(await check({ ...s, authorization: { ...s.authorization, value: 20_000n } })).toEqual({
      ok: false,
      reason: 'invalid_signature',
    })
    expect(
      await verifyTransferAuthorization({ usdc, chainId: 8453, ...s, payTo, minValue: 1n, nowSeconds: now }),
    ).toEqual({ ok: false, reason: 'invalid_signature' })
    // Same signer, malleated signature: ecrecover would accept it, USDC does not.
    const n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
    const sValue = hexToBigInt(`0x${s.signature.slice(66, 130)}`)
    const v = s.signature.slice(130) === '1b' ? '1c' : '1b'
    const twin = `${s.signature.slice(0, 66)}${numberToHex(n - sValue, { size: 32 }).slice(2)}${v}` as Hex
    expect(await check({ ...s, signature: twin })).toEqual({ ok: false, reason: 'invalid_signature' })
    expect(await check({ ...s, signature: '0x1234' })).toEqual({ ok: false, reason: 'invalid_signature' })
  })

  it('refuses another recipient and a smaller value', async () => {
    expect(await check(await signed({ to: usdc.address }))).toEqual({ ok: false, reason: 'wrong_recipient' })
    expect(await check(await signed({ value: 9_999n }))).toEqual({ ok: false, reason: 'underpaid' })
  })

  it('refuses an authorization outside its validity window, or too close to its end to settle', async () => {
    expect(await check(await signed({ validAfter: now + 1n }))).toEqual({
      ok: false,
      reason: 'authorization_not_yet_valid',
    })
    expect(await check(await signed({ validBefore: now - 1n }))).toEqual({
      ok: false,
      reason: 'authorization_expired',
    })
    expect(await check(await signed({ validBefore: now + 5n }))).toEqual({
      ok: false,
      reason: 'authorization_expired',
    })
  })
})
