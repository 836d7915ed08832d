// Single-file components as tsc sees them (their own types are checked by no one here: Vite only
// transpiles them, and vue-tsc is not part of this build).
declare module '*.vue' {
  import type { DefineComponent } from 'vue'
  const component: DefineComponent<object, object, unknown>
  export default component
}
