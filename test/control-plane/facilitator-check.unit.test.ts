// The facilitator's local checks of an exact payload (no chain, no database): each refusal with the x402
// specification's reason, and what an accepted payload is claimed as.
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { signTransferAuthorization } from '../../src/chain/authorization.ts'
import type { ChainInfo } from '../../src/chain/info.ts'
import { checkTerms, type Terms } from '../../src/control-plane/facilitator-check.ts'

const payer = privateKeyToAccount('0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d')
const chain: ChainInfo = {
  network: 'base-sepolia',
  chainId: 84532,
  x402Network: 'base-sepolia',
  caip2: 'eip155:84532',
  treasury: '0x1111111111111111111111111111111111111111',
  usdcAddress: '0x036CbD53842c5426634e7929541eC2318f3dCF7e',
  usdcName: 'USD Coin',
  usdcVersion: '2',
  explorerUrl: null,
}
const merchant = '0x2222222222222222222222222222222222222222'
const NOW = 1_800_000_000n
const NONCE = `0x${'ab'.repeat(32)}` as const

async function terms(
  o: { to?: `0x${string}`; value?: bigint; payTo?: string; amount?: string } = {},
): Promise<Terms> {
  const { authorization, signature } = await signTransferAuthorization(payer, {
    usdc: { address: chain.usdcAddress, name: chain.usdcName, version: chain.usdcVersion },
    chainId: chain.chainId,
    to: o.to ?? chain.treasury,
    value: o.value ?? 10_000n,
    validAfter: NOW - 600n,
    validBefore: NOW + 300n,
    nonce: NONCE,
  })
  const payload = {
    signature,
    authorization: {
      ...authorization,
      value: authorization.value.toString(),
      validAfter: authorization.validAfter.toString(),
      validBefore: authorization.validBefore.toString(),
    },
  }
  const req = {
    scheme: 'exact',
    network: 'eip155:84532',
    amount: o.amount ?? '10000',
    asset: chain.usdcAddress,
    payTo: o.payTo ?? chain.treasury,
  }
  return {
    x402Version: 2,
    ...req,
    extra: { name: 'USD Coin', version: '2' },
    accepted: req,
    payloadScheme: 'exact',
    payloadNetwork: 'eip155:84532',
    payload,
  }
}

const ctx = { chain, accountWallet: merchant, nowSeconds: NOW }

describe('facilitator checks', () => {
  it('accepts an exact payload to the treasury, keyed as a metered call would claim it', async () => {
    const r = await checkTerms(await terms(), ctx)
    expect(r).toMatchObject({
      ok: true,
      custody: 'treasury',
      valueAtomic: 10_000n,
      proofKey: `auth:84532:${chain.usdcAddress.toLowerCase()}:${payer.address.toLowerCase()}:${NONCE}`,
    })
  })

  it('accepts one to the account’s own wallet as merchant custody', async () => {
    const r = await checkTerms(await terms({ to: merchant, payTo: merchant }), ctx)
    expect(r).toMatchObject({ ok: true, custody: 'merchant' })
  })

  it('refuses each wrong term with the specification’s reason', async () => {
    const stranger = '0x3333333333333333333333333333333333333333'
    const cases: Array<[Terms, string]> = [
      [{ ...(await terms()), network: 'eip155:8453' }, 'invalid_network'],
      [{ ...(await terms()), scheme: 'upto', payloadScheme: 'upto' }, 'unsupported_scheme'],
      [{ ...(await terms()), asset: stranger }, 'invalid_payment_requirements'],
      [{ ...(await terms()), extra: { name: 'USDC', version: '2' } }, 'invalid_payment_requirements'],
      [await terms({ to: stranger, payTo: stranger }), 'pay_to_not_allowed'],
      [{ ...(await terms()), payload: { signature: '0x00' } }, 'invalid_payload'],
      [await terms({ value: 10_001n }), 'invalid_exact_evm_payload_authorization_value'],
      [await terms({ to: merchant }), 'invalid_exact_evm_payload_recipient_mismatch'],
    ]
    for (const [t, reason] of cases)
      expect((await checkTerms(t, ctx)) as object).toMatchObject({ ok: false, reason })
    const late = await checkTerms(await terms(), { ...ctx, nowSeconds: NOW + 299n })
    expect(late).toMatchObject({ ok: false, reason: 'invalid_exact_evm_payload_authorization_valid_before' })
    const forged = await terms()
    const p = forged.payload as { signature: string }
    p.signature = `${p.signature.slice(0, 10)}${p.signature[10] === 'a' ? 'b' : 'a'}${p.signature.slice(11)}`
    expect(await checkTerms(forged, ctx)).toMatchObject({
      ok: false,
      reason: 'invalid_exact_evm_payload_signature',
    })
  })

  it('names the payTo it refuses', async () => {
    const stranger = '0x3333333333333333333333333333333333333333'
    const r = await checkTerms(await terms({ to: stranger, payTo: stranger }), ctx)
    expect(r.ok === false && r.message).toContain(stranger)
  })
})
