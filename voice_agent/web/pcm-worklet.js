// AudioWorklet: microphone float samples at the context rate -> 16 kHz PCM16 frames of 20 ms.
// Downsampling averages the input samples that fall into each output sample (a box filter):
// crude, but it keeps the worst aliasing out of the 0-8 kHz band the recognizer listens to.
class PcmDownsampler extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.outRate = (options && options.processorOptions && options.processorOptions.outRate) || 16000;
    this.ratio = sampleRate / this.outRate;   // sampleRate: the AudioContext's, a worklet global
    this.frame = new Int16Array(this.outRate / 50);
    this.fill = 0;
    this.pos = 0;      // fractional input position of the next output sample
    this.acc = 0;
    this.count = 0;
  }

  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const ch = input[0];
    for (let i = 0; i < ch.length; i++) {
      this.acc += ch[i];
      this.count += 1;
      this.pos += 1;
      if (this.pos >= this.ratio) {
        this.pos -= this.ratio;
        const v = Math.max(-1, Math.min(1, this.acc / this.count));
        this.acc = 0;
        this.count = 0;
        this.frame[this.fill++] = v < 0 ? v * 32768 : v * 32767;
        if (this.fill === this.frame.length) {
          this.port.postMessage(this.frame.buffer, [this.frame.buffer]);
          this.frame = new Int16Array(this.outRate / 50);
          this.fill = 0;
        }
      }
    }
    return true;
  }
}

registerProcessor("pcm-downsampler", PcmDownsampler);
