// The hand-built voucher digest of the hot path equals the EIP-712 one (and the published client's).
import { signVoucher } from '@x402/evm/batch-settlement/client'
import { recoverTypedDataAddress } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import {
  batchDomain,
  voucherDigest,
  voucherDigestBytes,
  voucherTypes,
} from '../../src/chain/batch-channel.ts'
import { recoverSigner } from '../../src/chain/recover-authorization.ts'

describe('voucher digest', () => {
  it('built by hand equals hashTypedData for any amount up to uint128', () => {
    const channelId = `0x${'ab'.repeat(32)}` as const
    for (const amount of [0n, 1n, 1000n, 123_456_789_012_345n, (1n << 128n) - 1n]) {
      const fast = Buffer.from(voucherDigestBytes(84532, channelId, amount)).toString('hex')
      expect(`0x${fast}`).toBe(voucherDigest(84532, channelId, amount))
    }
    expect(() => voucherDigestBytes(84532, channelId, 1n << 128n)).toThrow(RangeError)
  })

  it("recovers the published client's voucher signer", async () => {
    const account = privateKeyToAccount(generatePrivateKey())
    const channelId = `0x${'cd'.repeat(32)}` as const
    const voucher = await signVoucher(account, channelId, '5000', 'eip155:31337')
    const digest = voucherDigestBytes(31337, channelId, 5000n)
    expect(await recoverSigner(digest, voucher.signature as `0x${string}`)).toBe(
      account.address.toLowerCase(),
    )
    const viaViem = await recoverTypedDataAddress({
      domain: batchDomain(31337),
      types: voucherTypes,
      primaryType: 'Voucher',
      message: { channelId, maxClaimableAmount: 5000n },
      signature: voucher.signature as `0x${string}`,
    })
    expect(viaViem).toBe(account.address)
  })
})
