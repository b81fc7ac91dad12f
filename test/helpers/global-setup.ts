// Starts one anvil with the project's test USDC for the whole run; tests reach it through inject().
import type { TestProject } from 'vitest/node'
import { startDevChain } from '../../src/chain/dev-chain.ts'

declare module 'vitest' {
  export interface ProvidedContext {
    rpcUrl: string
    usdcAddress: string
    chainId: number
  }
}

export default async function setup(project: TestProject) {
  const chain = await startDevChain({ payers: 0, payerFunding: 0n })
  project.provide('rpcUrl', chain.rpcUrl)
  project.provide('usdcAddress', chain.usdcAddress)
  project.provide('chainId', chain.chainId)
  return async () => {
    await chain.stop()
  }
}
