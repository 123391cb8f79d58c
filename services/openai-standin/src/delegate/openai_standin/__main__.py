from delegate.openai_standin import main

if __name__ == "__main__":
    main.run()
