// The chain facts both planes need, as plain values: service.ts describes the connected chain once and hands
// the same object to the data plane and the control plane, so neither reaches into the other for it.
import type { ChainContext } from './connect.ts'

export interface ChainInfo {
  network: 'local' | 'base' | 'base-sepolia'
  chainId: number
  /** x402 v1 network name and CAIP-2 id. */
  x402Network: string
  caip2: string
  treasury: `0x${string}`
  usdcAddress: `0x${string}`
  usdcName: string
  usdcVersion: string
  explorerUrl: string | null
}

/** The chain facts the two planes need, as plain values. */
export function describeChain(chain: ChainContext): ChainInfo {
  return {
    network: chain.network,
    chainId: chain.chainId,
    x402Network: chain.x402Network,
    caip2: chain.caip2,
    treasury: chain.treasury,
    usdcAddress: chain.usdc.address,
    usdcName: chain.usdc.name,
    usdcVersion: chain.usdc.version,
    explorerUrl: chain.explorerUrl,
  }
}
