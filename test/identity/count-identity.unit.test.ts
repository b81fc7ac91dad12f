// The identity metric's labels stay bounded: configured signer names, 'none', and the declared outcomes.
import { describe, expect, it } from 'vitest'
import { countAgentCall, countAgentRevenue, countIdentity } from '../../src/identity/count-identity.ts'
import { agentCalls, agentIdentity, agentRevenueAtomic } from '../../src/observability/metrics.ts'

describe('agent identity metric', () => {
  it('labels by configured signer and outcome, and never by a name it was not given', async () => {
    agentIdentity.reset()
    const names = new Set(['acme'])
    const verified = (signer: string) =>
      ({
        status: 'verified',
        signer,
        keyid: 'k',
        agent: null,
        alg: 'ed25519',
        purpose: null,
        nonce: { key: 'n', expiresAtMs: 0 },
      }) as const
    countIdentity(names, verified('acme'))
    countIdentity(names, verified('acme'))
    countIdentity(names, verified('made-up'))
    countIdentity(names, { status: 'unsigned' })
    countIdentity(names, { status: 'failed', reason: 'replayed_nonce' })
    const values = (await agentIdentity.get()).values.map((v) => [v.labels.signer, v.labels.outcome, v.value])
    expect(values).toEqual([
      ['acme', 'verified', 2],
      ['none', 'verified', 1],
      ['none', 'unsigned', 1],
      ['none', 'replayed_nonce', 1],
    ])
  })

  it('counts calls and revenue per identity: configured signers by name, the rest "unsigned" or "other"', async () => {
    agentCalls.reset()
    agentRevenueAtomic.reset()
    const names = new Set(['acme'])
    countAgentCall(names, 'acme', 'multiplier')
    countAgentCall(names, 'unsigned', 'block')
    countAgentCall(names, 'made-up', 'free')
    const agent = (signer: string) => ({ signer, keyid: null, failure: null, rule: 0, action: 'price' })
    countAgentRevenue(names, agent('acme'), 5_000n)
    countAgentRevenue(names, agent('acme'), 2_500n)
    countAgentRevenue(names, agent('unsigned'), 10_000n)
    countAgentRevenue(names, agent('made-up'), 1n)
    const calls = (await agentCalls.get()).values.map((v) => [v.labels.signer, v.labels.action, v.value])
    expect(calls).toEqual([
      ['acme', 'multiplier', 1],
      ['unsigned', 'block', 1],
      ['other', 'free', 1],
    ])
    const revenue = (await agentRevenueAtomic.get()).values.map((v) => [v.labels.signer, v.value])
    expect(revenue).toEqual([
      ['acme', 7_500],
      ['unsigned', 10_000],
      ['other', 1],
    ])
  })
})
