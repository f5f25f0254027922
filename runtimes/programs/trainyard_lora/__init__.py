"""The parts of Trainyard's reference LoRA program; ``lora_peft.py`` beside this package is the program itself."""
