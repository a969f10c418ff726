// Jest runs in native ESM mode (the package is "type": "module"); ts-jest compiles TypeScript
// without type-checking (tsc does that in the build), keeping decorators and their metadata.
/** @type {import('jest').Config} */
export default {
  testEnvironment: 'node',
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: {
    '^.+\\.ts$': ['ts-jest', { useESM: true, isolatedModules: true, tsconfig: 'tsconfig.json' }],
  },
  testMatch: ['<rootDir>/test/**/*.spec.ts'],
  // Projects of their own (a default Nest 11 and a Nest 12 app), run by test/e2e/default-projects.
  testPathIgnorePatterns: ['/node_modules/', '<rootDir>/test/consumers/'],
  globalSetup: '<rootDir>/test/support/global-setup.ts',
  globalTeardown: '<rootDir>/test/support/global-teardown.ts',
  testTimeout: 60000,
};
