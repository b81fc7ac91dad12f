// The hand-built EIP-712 digest and the fast recovery (native libsecp256k1 when installed, else viem's) agree
// with viem's generic typed-data recovery; which backend ran is in the suite's name.
import { type Address, type Hex, recoverTypedDataAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import {
  authorizationTypedData,
  createAuthorizationNonce,
  signTransferAuthorization,
  verifyTransferAuthorization,
} from '../../src/chain/authorization.ts'
import {
  authorizationDigest,
  domainSeparator,
  recoverSigner,
  recoveryBackend,
} from '../../src/chain/recover-authorization.ts'

const usdc = {
  address: '0x036CbD53842c5426634e7929541eC2318f3dCF7e' as Address,
  name: 'USDC',
  version: '2',
}
const chainId = 84532
const separator = () => domainSeparator({ ...usdc, chainId, verifyingContract: usdc.address })

async function signed(value = 1_000n) {
  const account = privateKeyToAccount(generatePrivateKey())
  const to = privateKeyToAccount(generatePrivateKey()).address
  const s = await signTransferAuthorization(account, {
    usdc,
    chainId,
    to,
    value,
    validAfter: 0n,
    validBefore: 4_000_000_000n,
    nonce: createAuthorizationNonce(),
  })
  return { account, to, ...s }
}

describe(`fast EIP-3009 signer recovery (${recoveryBackend})`, () => {
  it('recovers the same signer as viem for 20 random keys and authorizations', async () => {
    for (let i = 0; i < 20; i++) {
      const { account, authorization, signature } = await signed(BigInt(i) * 123_456_789n + 1n)
      const viem = await recoverTypedDataAddress({
        ...authorizationTypedData({ usdc, chainId }, authorization),
        signature,
      })
      const fast = await recoverSigner(authorizationDigest(separator(), authorization), signature)
      expect(fast).toBe(account.address.toLowerCase())
      expect(viem).toBe(account.address)
    }
  })

  it('a changed field or another domain gives another signer, so verification refuses it', async () => {
    const { account, to, authorization, signature } = await signed()
    const tampered = { ...authorization, value: authorization.value + 1n }
    expect(await recoverSigner(authorizationDigest(separator(), tampered), signature)).not.toBe(
      account.address.toLowerCase(),
    )
    const otherChain = domainSeparator({ ...usdc, chainId: 8453, verifyingContract: usdc.address })
    expect(await recoverSigner(authorizationDigest(otherChain, authorization), signature)).not.toBe(
      account.address.toLowerCase(),
    )
    const check = await verifyTransferAuthorization({
      usdc,
      chainId,
      authorization: tampered,
      signature,
      payTo: to,
      minValue: 1n,
    })
    expect(check).toEqual({ ok: false, reason: 'invalid_signature' })
  })

  it('accepts a 0/1 recovery id and refuses malformed signatures', async () => {
    const { account, to, authorization, signature } = await signed()
    const v = Number.parseInt(signature.slice(130), 16)
    const zeroOne = `${signature.slice(0, 130)}${(v - 27).toString(16).padStart(2, '0')}` as Hex
    const digest = authorizationDigest(separator(), authorization)
    expect(await recoverSigner(digest, zeroOne)).toBe(account.address.toLowerCase())
    expect(await recoverSigner(digest, `${signature.slice(0, 130)}05` as Hex)).toBeNull()
    expect(await recoverSigner(digest, signature.slice(0, 128) as Hex)).toBeNull()
    expect(await recoverSigner(digest, `0x${'00'.repeat(65)}` as Hex)).toBeNull()
    const ok = await verifyTransferAuthorization({
      usdc,
      chainId,
      authorization,
      signature,
      payTo: to,
      minValue: 1n,
    })
    expect(ok).toEqual({ ok: true, payer: account.address })
    const badNonce = { ...authorization, nonce: '0x1234' as Hex }
    expect(
      await verifyTransferAuthorization({
        usdc,
        chainId,
        authorization: badNonce,
        signature,
        payTo: to,
        minValue: 1n,
      }),
    ).toEqual({ ok: false, reason: 'invalid_signature' })
  })
})
