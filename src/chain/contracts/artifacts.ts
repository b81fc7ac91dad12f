// The compiled contracts (built by build.ts, committed), typed for viem's deployContract.
import type { Abi, Hex } from 'viem'
import disperseJson from './disperse.artifact.json' with { type: 'json' }
import testUsdcJson from './test-usdc.artifact.json' with { type: 'json' }

export interface Artifact {
  contractName: string
  abi: Abi
  bytecode: Hex
}

export const testUsdcArtifact = testUsdcJson as unknown as Artifact
export const disperseArtifact = disperseJson as unknown as Artifact
